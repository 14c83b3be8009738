"""`resched classify`: text and JSON output, argument errors in one line."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from workflows.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def invoke(*args: str):
    return CliRunner().invoke(main, ["classify", *args])


def test_text_output_names_rule_evidence_lines_and_hint() -> None:
    log = FIXTURES / "nccl-remote-error.log"
    result = invoke("--log", str(log), "--exit-code", "1")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "rule: nccl-error   category: network   decision: retry"
    assert any(line.startswith("rank exit codes: rank 3: 1") and "root cause rank: 3" in line for line in lines)
    evidence = [line for line in lines if f"{log} line " in line and "ncclRemoteError" in line]
    assert evidence
    lineno = int(evidence[0].split(" line ")[1].split(":")[0])
    assert "ncclRemoteError" in log.read_text().splitlines()[lineno - 1]
    assert lines[-1].startswith("hint: NCCL network")


def test_json_output_has_the_documented_keys() -> None:
    result = invoke("--log", str(FIXTURES / "megatron-16-torchrun.log"), "--exit-code", "1", "--format", "json")
    data = json.loads(result.output)
    assert {"rule", "category", "decision", "evidence", "hint", "rank_exit_codes", "root_cause_rank"} <= set(data)
    assert (data["rule"], data["decision"], data["root_cause_rank"]) == ("megatron-rerun-16", "reschedule", 3)
    assert data["rank_exit_codes"] == {"3": 16, "4": -15, "5": -15}
    assert all(set(e) == {"source", "line", "text"} for e in data["evidence"])


def test_signal_by_name_and_tracker_and_flags() -> None:
    assert json.loads(invoke("--signal", "SIGKILL", "--format", "json").output)["rule"] == "killed-by-signal"
    assert json.loads(invoke("--signal", "9", "--hung", "--format", "json").output)["rule"] == "hang-detected"
    preempted = json.loads(invoke("--signal", "TERM", "--stop-requested", "SIGTERM", "--format", "json").output)
    assert (preempted["rule"], preempted["counts_as_failure"]) == ("preempted", False)
    graceful = invoke("--exit-code", "0", "--expect-finished", "unfinished", "--format", "json").output
    assert json.loads(graceful)["rule"] == "graceful-stop-unfinished"
    tracker = json.loads(invoke("--exit-code", "17", "--tracker", str(FIXTURES / "megatron-17-reproducible.tracker"),
                                "--format", "json").output)
    assert (tracker["rule"], tracker["decision"]) == ("megatron-rerun-17-reproducible", "abort")


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    result = invoke("--log", str(tmp_path / "nope.log"))
    assert result.exit_code == 2
    assert result.output.strip() == f"resched: error: --log: no such file: {tmp_path / 'nope.log'}"
    result = invoke("--signal", "SIGWHAT")
    assert result.exit_code == 2 and "resched: error: --signal: 'SIGWHAT' is not a known signal name" in result.output
