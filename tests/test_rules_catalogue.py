"""Every catalogue rule against real-looking multi-rank log fixtures.

Each case in tests/fixtures/logs/cases.yaml is a saved log (+ error files, tracker
file, exit status) with the expected diagnosis; ``negative_for`` names rules that must
not win on it. Every rule of the shipped catalogue needs at least one positive and one
negative case (the coverage test enforces it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from wrapper.classifier import classify_artifacts
from wrapper.classifier.rules import load_rules
from wrapper.classifier.scanner import LineScanner

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
REAL = FIXTURES / "real"
CASES: list[dict[str, Any]] = yaml.safe_load((FIXTURES / "cases.yaml").read_text())["cases"]
REAL_CASES: list[dict[str, Any]] = yaml.safe_load((REAL / "cases.yaml").read_text())["cases"]
RULES = load_rules()


def run_case(case: dict[str, Any], base: Path = FIXTURES):
    expect_finished = case.get("expect_finished")
    launcher = case.get("launcher")
    return classify_artifacts(
        logs=[base / p for p in case["logs"]],
        error_files=[base / p for p in case.get("error_files", [])],
        exit_code=case.get("exit_code"),
        signal=case.get("signal"),
        rules=RULES,
        tracker_file=base / case["tracker"] if case.get("tracker") else None,
        hung=bool(case.get("hung")),
        stop_signal=case.get("stop_requested"),
        expect_finished=expect_finished is not None,
        finished=expect_finished == "finished",
        launcher=None if launcher in (None, "none") else launcher,
    )


@pytest.mark.parametrize(
    ("case", "base"),
    [(c, FIXTURES) for c in CASES] + [(c, REAL) for c in REAL_CASES],
    ids=[c["name"] for c in CASES] + [f"real-{c['name']}" for c in REAL_CASES],
)
def test_fixture_diagnosis(case: dict[str, Any], base: Path) -> None:
    diagnosis = run_case(case, base)
    expect = case["expect"]
    assert (diagnosis.rule_id, diagnosis.decision) == (expect["rule"], expect["decision"]), diagnosis.to_json()
    assert diagnosis.rule_id not in case.get("negative_for", [])
    if expect.get("hits"):  # the `marks` rules whose lines the case must hold
        scanner = LineScanner(RULES)
        for log in case["logs"]:
            scanner.feed_text((base / log).read_text(encoding="utf-8"), stream=log)
        assert set(expect["hits"]) <= {hit.rule_id for hit in scanner.hits}
    if "exclude_node" in expect:
        assert diagnosis.exclude_node is expect["exclude_node"]
    if "root_cause_rank" in expect:
        assert diagnosis.root_cause_rank == expect["root_cause_rank"]
    if "rank_exit_codes" in expect:
        assert dict(diagnosis.rank_exit_codes) == expect["rank_exit_codes"]
    for line in diagnosis.evidence:
        assert "\x1b" not in line.text  # ANSI codes never reach the evidence
        assert len(line.text) <= 1010


def test_every_catalogue_rule_has_positive_and_negative_fixture() -> None:
    # a `marks` rule is evidence, not a cause: its positive case names it under `hits`
    positive = {c["expect"]["rule"] for c in CASES} | {
        rule for c in CASES for rule in c["expect"].get("hits", [])}
    negative = {rule for c in CASES for rule in c.get("negative_for", [])}
    ids = {rule.id for rule in RULES.rules}
    assert ids - positive == set(), "rules without a positive fixture"
    missing = sorted(ids - negative)
    assert missing == [], f"rules without a negative fixture: {missing}"


def test_evidence_points_at_the_root_cause_line() -> None:
    case = next(c for c in CASES if c["name"] == "nccl-remote-error")
    diagnosis = run_case(case)
    log_lines = (FIXTURES / case["logs"][0]).read_text().splitlines()
    hits = [e for e in diagnosis.evidence if e.source.endswith("nccl-remote-error.log") and "ncclRemoteError" in e.text]
    assert hits, diagnosis.evidence
    assert "ncclRemoteError" in log_lines[hits[0].lineno - 1]


def test_noise_alone_matches_nothing() -> None:
    from wrapper.classifier.scanner import LineScanner

    scanner = LineScanner(RULES)
    with open(FIXTURES / "noise-exit0.log", encoding="utf-8") as handle:
        for line in handle:
            scanner.feed(line)
    assert scanner.hits == ()
    assert scanner.lines_seen() > 600
