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
    assert json.loads(invoke("--no-log", "--signal", "SIGKILL", "--format", "json").output)["rule"] == "killed-by-signal"
    assert json.loads(invoke("--no-log", "--signal", "9", "--hung", "--format", "json").output)["rule"] == "hang-detected"
    preempted = json.loads(invoke("--no-log", "--signal", "TERM", "--stop-requested", "SIGTERM", "--format", "json").output)
    assert (preempted["rule"], preempted["counts_as_failure"]) == ("preempted", False)
    graceful = invoke("--no-log", "--exit-code", "0", "--expect-finished", "unfinished", "--format", "json").output
    assert json.loads(graceful)["rule"] == "graceful-stop-unfinished"
    tracker = json.loads(invoke("--no-log", "--exit-code", "17", "--tracker", str(FIXTURES / "megatron-17-reproducible.tracker"),
                                "--format", "json").output)
    assert (tracker["rule"], tracker["decision"]) == ("megatron-rerun-17-reproducible", "abort")


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    result = invoke("--log", str(tmp_path / "nope.log"))
    assert result.exit_code == 2
    assert result.output.strip() == f"resched: error: --log: no such file: {tmp_path / 'nope.log'}"
    result = invoke("--no-log", "--signal", "SIGWHAT")
    assert result.exit_code == 2 and "resched: error: --signal: 'SIGWHAT' is not a known signal name" in result.output


def test_no_log_is_a_usage_error() -> None:
    result = invoke("--exit-code", "1")
    assert result.exit_code == 2
    assert "no log given: pass --log FILE" in result.output


def test_exit_code_out_of_range_and_exit_code_with_signal_are_one_line_errors() -> None:
    for code in ("256", "-9", "3006"):
        result = invoke("--no-log", "--exit-code", code)
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            f"resched: error: --exit-code: exit code {code} is not in 0..255 (fix: give the process's exit "
            "status (a launcher's -N means --signal N))"]
    result = invoke("--no-log", "--exit-code", "1", "--signal", "KILL")
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "--exit-code and --signal both given" in result.output


def _history(tmp_path: Path, *attempts: dict) -> Path:
    path = tmp_path / "history.json"
    path.write_text(json.dumps({"version": 1, "attempts": list(attempts), "node_failures": {}}))
    return path


def test_history_retry_then_reschedule_when_it_repeats_on_this_node(tmp_path: Path) -> None:
    log = FIXTURES / "nccl-remote-error.log"
    base = ("--log", str(log), "--exit-code", "1", "--node", "n1", "--format", "json")
    first = json.loads(invoke(*base, "--history", str(_history(tmp_path))).output)
    assert (first["decision"], first["policy"]["decision"]) == ("retry", "retry")
    earlier = {"rule": "nccl-error", "decision": "retry", "node": "n1", "allocation": "a1",
               "counts_as_failure": True, "checkpoint_step_after": 100}
    again = json.loads(invoke(*base, "--history", str(_history(tmp_path, earlier))).output)
    assert again["policy"]["decision"] == "reschedule", again["policy"]
    assert "on this node" in again["policy"]["reason"]
    # the same failure seen before on ANOTHER node: this node gets its own retry
    elsewhere = dict(earlier, node="n2")
    other = json.loads(invoke(*base, "--history", str(_history(tmp_path, elsewhere))).output)
    assert other["policy"]["decision"] == "retry"


def test_history_budget_exhausted_aborts_and_text_names_it(tmp_path: Path) -> None:
    log = FIXTURES / "cuda-devices-busy.log"  # a node fault: reschedule, no retry in place
    # moves off a blamed node are free up to 8 without progress; then 2 failure reschedules
    attempts = [{"rule": f"r{i}", "decision": "reschedule", "node": f"n{i}", "allocation": f"a{i}",
                 "counts_as_failure": True, "exclude_node": i < 8,
                 "node_replacement": i < 8} for i in range(10)]
    result = invoke("--log", str(log), "--exit-code", "1", "--history", str(_history(tmp_path, *attempts)))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1].startswith("with history: abort (")
    assert "reschedule budget used up" in result.output


def test_bad_history_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text("{not json")
    result = invoke("--no-log", "--exit-code", "1", "--history", str(path))
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert result.output.startswith(f"resched: error: {path}: not a resched history")


def test_explain_lists_every_match_and_why_one_won() -> None:
    log = FIXTURES / "socket-error-then-nvlink-xid.log"
    result = invoke("--log", str(log), "--exit-code", "1", "--explain")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.splitlines()[0].startswith("rule: gpu-hardware-fault")
    assert "why: gpu-hardware-fault won: primary rule" in out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ") and "(primary" in line]
    assert listed[0] == "gpu-hardware-fault" and "nccl-error" in listed
    assert "outranks the errors it causes" in out


def test_unknown_failure_explains_itself(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("step 1 loss 2.3\nstep 2 loss 2.2\nWeirdLibThing: the frobnicator stalled and could not "
                   "reach the parameter shard\nshutting down\n")
    data = json.loads(invoke("--log", str(log), "--exit-code", "1", "--format", "json").output)
    assert data["rule"] == "unknown-failure"
    texts = [e["text"] for e in data["evidence"]]
    assert any("frobnicator stalled" in t for t in texts)
    line = next(e for e in data["evidence"] if "frobnicator" in e["text"])
    assert line["line"] == 3
