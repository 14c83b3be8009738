"""User rule files: precedence, overriding a catalogue rule, and the copyable pattern
for unit-testing team rules (this is what users copy into their own repository)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wrapper.classifier import classify_artifacts
from wrapper.classifier.classify import Evidence, LineScanner, classify
from wrapper.classifier.rules import load_rules

RULES_DIR = Path(__file__).parent / "fixtures" / "rules"
TEAM_RULES = RULES_DIR / "team-rules.yaml"


# ---- the pattern to copy: one test per rule, positive and negative ----------------
def classify_log(log: Path, exit_code: int = 1, rules: Path = TEAM_RULES):
    return classify_artifacts(logs=[log], error_files=[], exit_code=exit_code, signal=None,
                              rules=load_rules([rules]))


def test_team_ib_flap_positive() -> None:
    diagnosis = classify_log(RULES_DIR / "ib-flap.log")
    assert diagnosis.rule_id == "team/ib-flap"
    assert diagnosis.decision == "retry"
    assert [e.lineno for e in diagnosis.evidence if e.source.endswith("ib-flap.log")] == [4]


def test_team_ib_flap_negative_without_team_rules(tmp_path: Path) -> None:
    # without the team file the catalogue calls the same log a plain NCCL error
    diagnosis = classify_artifacts(logs=[RULES_DIR / "ib-flap.log"], error_files=[], exit_code=1,
                                   signal=None, rules=load_rules())
    assert diagnosis.rule_id == "nccl-error"


def test_team_ib_flap_negative_other_error_code(tmp_path: Path) -> None:
    log = tmp_path / "other.log"
    log.write_text("dgx-a10:3394:3502 [3] NCCL WARN NET/IB : Got completion from peer 10.0.0.21<42119> with error 5\n")
    assert classify_log(log).rule_id != "team/ib-flap"


def test_team_corrupt_shard_from_error_file(tmp_path: Path) -> None:
    error_file = tmp_path / "attempt_0" / "2" / "error.json"
    error_file.parent.mkdir(parents=True)
    error_file.write_text(json.dumps({"message": {"message": "ShardCorruptError: shard 812 bad crc",
                                                  "extraInfo": {"py_callstack": "", "timestamp": "1795241740"}}}))
    diagnosis = classify_artifacts(logs=[], error_files=[error_file], exit_code=1, signal=None,
                                   rules=load_rules([TEAM_RULES]))
    assert (diagnosis.rule_id, diagnosis.decision, diagnosis.root_cause_rank) == ("team/corrupt-shard", "abort", 2)


def test_user_rule_replaces_catalogue_rule_with_same_id(tmp_path: Path) -> None:
    log = tmp_path / "oom.log"
    log.write_text("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    rules = load_rules([TEAM_RULES])
    assert [r.id for r in rules.rules].count("cuda-oom") == 1
    assert rules.by_id("cuda-oom").source == str(TEAM_RULES)
    assert classify_log(log).decision == "retry"
    assert classify_log(log, rules=RULES_DIR / "team-rules.yaml").escalate.to == "abort"


def test_user_rules_take_precedence_over_more_specific_catalogue_rules(tmp_path: Path) -> None:
    team = tmp_path / "team.yaml"
    team.write_text("rules:\n- id: any-nccl\n  category: network\n  decision: reschedule\n"
                    "  match: {patterns: ['NCCL error']}\n")
    scanner = LineScanner(load_rules([team]))
    hit = scanner.feed("[rank3]: torch.distributed.DistBackendError: NCCL error in: x.cpp:1, ncclRemoteError\n")
    assert hit is not None and hit.rule_id == "any-nccl"  # the first (highest-precedence) hit is returned
    diagnosis = classify(Evidence(exit_code=1, hits=scanner.hits), load_rules([team]))
    assert diagnosis.rule_id == "any-nccl"
    assert "nccl-error" in diagnosis.also_matched


def test_later_user_file_loses_to_earlier(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("- {id: first, category: x, decision: abort, match: {patterns: ['boom']}}\n")
    second.write_text("- {id: second, category: x, decision: retry, match: {patterns: ['boom']}}\n")
    log = tmp_path / "l.log"
    log.write_text("boom\n")
    d = classify_artifacts(logs=[log], error_files=[], exit_code=1, signal=None, rules=load_rules([first, second]))
    assert d.rule_id == "first"
    d = classify_artifacts(logs=[log], error_files=[], exit_code=1, signal=None, rules=load_rules([second, first]))
    assert d.rule_id == "second"


@pytest.mark.e2e
def test_cli_json_with_team_rules() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "classify", "--log", str(RULES_DIR / "ib-flap.log"),
         "--exit-code", "1", "--rules", str(TEAM_RULES), "--format", "json"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["rule"] == "team/ib-flap" and data["decision"] == "retry" and data["category"] == "network"
    assert {"source", "line", "text"} <= set(data["evidence"][1])
