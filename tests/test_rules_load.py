"""Loading and validating rule files: every mistake is one line naming file, rule, field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wrapper.classifier.rules import (
    CATALOGUE_PATH,
    DECISIONS,
    RulesError,
    load_rule_file,
    load_rules,
    parse_signal,
)


def write(tmp_path: Path, text: str, name: str = "team.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(path: Path) -> str:
    with pytest.raises(RulesError) as info:
        load_rules([path])
    text = str(info.value)
    assert "\n" not in text
    return text


def test_catalogue_loads_and_every_rule_is_complete() -> None:
    rules = load_rule_file(CATALOGUE_PATH)
    assert len(rules) >= 30
    for rule in rules:
        assert rule.decision in DECISIONS and rule.category and rule.hint, rule.id
    assert rules[-1].id == "unknown-failure"


def test_bad_decision_names_file_rule_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, "rules:\n- id: ib-flap\n  category: network\n  decision: retryy\n  match: {patterns: [x]}\n")
    assert error_of(path) == (
        f"{path}: rule 'ib-flap' field 'decision': 'retryy' is not one of complete, retry, reschedule, abort"
    )


def test_invalid_regex_is_caught_at_load_time(tmp_path: Path) -> None:
    path = write(tmp_path, "- id: r1\n  category: c\n  decision: abort\n  match: {patterns: ['ok', 'bad(']}\n")
    text = error_of(path)
    assert "rule 'r1' field 'match.patterns[1]': invalid regex 'bad('" in text


def test_regex_matching_every_line_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "- id: r1\n  category: c\n  decision: abort\n  match: {patterns: ['.*']}\n")
    assert "matches the empty line" in error_of(path)


def test_double_quoted_backslash_b_is_refused_not_silently_a_backspace(tmp_path: Path) -> None:
    # YAML reads "\bfoo" as backspace + foo: a rule that can never match a log line
    path = write(tmp_path, '- id: r1\n  category: c\n  decision: abort\n  match: {patterns: ["\\bfoo"]}\n')
    text = error_of(path)
    assert "rule 'r1' field 'match.patterns[0]'" in text and "control character" in text
    # the same regex in single quotes is a word boundary, and loads
    ok = write(tmp_path, "- id: r1\n  category: c\n  decision: abort\n  match: {patterns: ['\\bfoo']}\n")
    assert load_rules([ok]).by_id("r1") is not None
    # a tab is a character log lines hold ("\tsize mismatch for ..."): allowed
    tab = write(tmp_path, '- id: r2\n  category: c\n  decision: abort\n  match: {patterns: ["\\tsize mismatch"]}\n')
    assert load_rules([tab]).by_id("r2") is not None


def test_rule_without_id_is_named_by_index(tmp_path: Path) -> None:
    path = write(tmp_path, "- {id: a, category: c, decision: abort, match: {}}\n- {category: c, decision: abort, match: {}}\n")
    assert error_of(path) == f"{path}: rule 1 field 'id': missing"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("{id: a, category: c, decision: abort, match: {}, colour: red}", "rule 'a' field 'colour': unknown field"),
        ("{id: a, category: c, decision: abort, match: {exit_code: [1]}}", "rule 'a' field 'match.exit_code': unknown condition"),
        ("{id: a, category: c, decision: abort, match: {exit_codes: [one]}}", "rule 'a' field 'match.exit_codes': 'one' is not a whole number"),
        ("{id: a, category: c, decision: abort, match: {signals: [SIGFOO]}}", "rule 'a' field 'match.signals': 'SIGFOO' is not a known signal name"),
        ("{id: a, category: c, decision: abort, match: [{hung: yes-please}]}", "rule 'a' field 'match.hung': expected true or false"),
        ("{id: a, category: c, decision: retry, escalate: {after: 1, to: retry}, match: {}}", "rule 'a' field 'escalate.to': 'retry' is not one of reschedule, abort"),
        ("{id: a, category: c, decision: retry, escalate: {after: -1, to: abort}, match: {}}", "rule 'a' field 'escalate.after'"),
        ("{id: a, category: c, decision: retry, escalate: {after: 1, to: abort, scope: rack}, match: {}}", "rule 'a' field 'escalate.scope'"),
        ("{id: a, category: c, decision: abort}", "rule 'a' field 'match': missing"),
        ("{id: a, decision: abort, match: {}}", "rule 'a' field 'category': missing"),
        ("{id: a, category: c, decision: abort, cascade: maybe, match: {}}", "rule 'a' field 'cascade': expected true or false"),
        ("{id: 'a b', category: c, decision: abort, match: {}}", "field 'id'"),
        ("{id: a, category: c, decision: abort, match: [{}, {tracker_status: [1]}]}", "rule 'a' field 'match[1].tracker_status'"),
    ],
)
def test_field_errors(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path, f"- {body}\n")
    assert expected in error_of(path)


def test_duplicate_id_in_one_file(tmp_path: Path) -> None:
    path = write(tmp_path, "- {id: a, category: c, decision: abort, match: {}}\n- {id: a, category: c, decision: abort, match: {}}\n")
    assert "rule 'a' field 'id': duplicate id" in error_of(path)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "rules:\n- id: a\n  match: {patterns: [x\n")
    assert error_of(path).startswith(f"{path}:")


def test_missing_file(tmp_path: Path) -> None:
    assert "cannot read rules file" in error_of(tmp_path / "nope.yaml")


def test_unknown_top_level_key(tmp_path: Path) -> None:
    assert "unknown top-level key(s) rulez" in error_of(write(tmp_path, "rulez: []\n"))


def test_leading_inline_flags_work_inside_the_combined_prefilter(tmp_path: Path) -> None:
    from wrapper.classifier.scanner import LineScanner

    path = write(tmp_path, "- {id: a, category: c, decision: abort, match: {patterns: ['(?i)shard corrupt']}}\n")
    scanner = LineScanner(load_rules([path]))
    assert scanner.feed("SHARD CORRUPT at 12\n").rule_id == "a"


def test_parse_signal() -> None:
    assert parse_signal("9") == parse_signal("KILL") == parse_signal("SIGKILL") == parse_signal(9) == 9
    for bad in ("0", "SIGNOPE", 200):
        with pytest.raises(ValueError):
            parse_signal(bad)


@pytest.mark.e2e
def test_cli_reports_a_bad_rules_file_in_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "- {id: ib-flap, category: network, decision: retryy, match: {}}\n")
    result = subprocess.run([sys.executable, "-m", "workflows.cli", "classify", "--no-log", "--exit-code", "1", "--rules", str(path)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"resched: error: {path}: rule 'ib-flap' field 'decision': 'retryy' is not one of complete, retry, reschedule, abort"
    ]
