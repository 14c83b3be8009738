"""Per-rank recovery from torchelastic error files, failure summaries and tracker files,
including real torchrun runs (gloo / CPU) where the launcher hides a worker's exit 16."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from wrapper.classifier import classify_artifacts
from wrapper.classifier.classify import Evidence, LineScanner, classify
from wrapper.classifier.launcher_logs import (
    SummaryBlock,
    parse_error_file,
    parse_failure_summary,
    parse_tracker_line,
    recover,
    split_exception,
)
from wrapper.classifier.rules import load_rules

RULES = load_rules()
FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def test_split_exception() -> None:
    assert split_exception("KeyError: 'x'") == ("KeyError", "'x'")
    assert split_exception("torch.distributed.DistBackendError: NCCL") == ("torch.distributed.DistBackendError", "NCCL")
    assert split_exception("To enable traceback see: https://x") == (None, "To enable traceback see: https://x")


def test_error_file_with_agent_error_code(tmp_path: Path) -> None:
    path = tmp_path / "attempt_0" / "5" / "error.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"message": {"message": "ValueError: lr", "extraInfo": {"py_callstack": "tb", "timestamp": "17"}},
                                "errorCode": 17}))
    failure = parse_error_file(path)
    assert (failure.rank, failure.exit_code, failure.exception_type, failure.timestamp) == (5, 17, "ValueError", 17.0)


def test_unreadable_error_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    assert parse_error_file(tmp_path / "bad.json") is None
    assert parse_error_file(tmp_path / "missing.json") is None


def test_tracker_line_message_keeps_spaces() -> None:
    fields = parse_tracker_line("ts=1 node=dgx a b device=3 jobID=9 rank=12 iteration=40 status=first_rerun_not_reproducible result=nan message=Possible transient error! x=y")
    assert fields["rank"] == "12" and fields["status"] == "first_rerun_not_reproducible"
    assert fields["message"] == "Possible transient error! x=y"
    assert parse_tracker_line("just a log line with a=b") == {}


def test_summary_root_cause_is_the_marked_entry_not_the_smallest_rank() -> None:
    lines = (FIXTURES / "megatron-16-torchrun.log").read_text().splitlines()
    failures = parse_failure_summary(lines, source="x.log")
    assert {f.rank: f.exit_code for f in failures} == {3: 16, 4: -15, 5: -15}
    assert [f.rank for f in failures if f.marked_root_cause] == [3]
    assert all(lines[f.lineno - 1].strip().startswith("exitcode") for f in failures)


_KILL_RACE_SUMMARY = """\
============================================================
/tmp/job/train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-21_07:10:49
  host      : vm
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 708)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 708
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_07:10:48
  host      : vm
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 707)
  error_file: /tmp/attempt/0/error.json
  traceback : Signal 15 (SIGTERM) received by PID 707
============================================================
"""


def test_a_root_cause_the_launcher_sigtermed_itself_yields_to_the_killed_rank() -> None:
    """torchrun dates a rank without an error file by when it noticed the exit, so the
    SIGKILLed rank 1 looks later than rank 0, which failed on the broken connection and
    which torchrun then stopped (-15). The root cause is the killed rank."""
    lines = tuple(_KILL_RACE_SUMMARY.splitlines())
    report = recover(summaries=[SummaryBlock("run.log", lines, 1)])
    assert report.root_cause is not None
    assert (report.root_cause.rank, report.root_cause.exit_code) == (1, -9)
    diagnosis = classify(Evidence(exit_code=1, launcher_summary_lines=lines, launcher="torchrun"), RULES)
    assert (diagnosis.rule_id, diagnosis.decision, diagnosis.root_cause_rank) == (
        "killed-by-signal", "retry", 1)


def _error_file(root: Path, rank: int, message: str, timestamp: int) -> Path:
    path = root / "attempt_0" / str(rank) / "error.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"message": {"message": message, "extraInfo": {
        "py_callstack": "Traceback ...", "timestamp": str(timestamp)}}}))
    return path


def test_a_peer_that_died_of_the_broken_connection_is_not_the_root_cause(tmp_path: Path) -> None:
    """Rank 1's NCCL error broke the collective; rank 0 died of 'Connection closed by
    peer' but its error file happened to be written first. The root cause is rank 1."""
    files = [
        _error_file(tmp_path, 0, "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553]"
                    " Connection closed by peer [127.0.0.1]:16307", 1000),
        _error_file(tmp_path, 1, "torch.distributed.DistBackendError: NCCL error in: "
                    "ProcessGroupNCCL.cpp:1970, remote process exited or there was a network "
                    "error\nncclRemoteError: ...", 1001),
    ]
    report = recover(error_files=files)
    assert report.root_cause is not None and report.root_cause.rank == 1
    diagnosis = classify_artifacts(logs=[], error_files=files, exit_code=1, signal=None, rules=RULES)
    assert (diagnosis.rule_id, diagnosis.root_cause_rank) == ("nccl-error", 1)


def test_at_the_same_moment_the_failure_that_says_why_is_the_root_cause(tmp_path: Path) -> None:
    """Rank 1 raised CUDA OOM; rank 0 segfaulted while gloo tore down (no error file) and
    torchrun noticed that a second before rank 1's error file was written and named it
    root cause. The root cause is the OOM on rank 1."""
    summary = _KILL_RACE_SUMMARY.replace("-9 (pid: 708)", "1 (pid: 708)").replace(
        "error_file: <N/A>", f"error_file: {tmp_path}/attempt_0/1/error.json").replace(
        "-15 (pid: 707)", "-11 (pid: 707)").replace(
        "error_file: /tmp/attempt/0/error.json", "error_file: <N/A>")
    oom = _error_file(tmp_path, 1, "torch.OutOfMemoryError: CUDA out of memory. Tried to "
                      "allocate 2.00 GiB", _epoch("2026-11-21_07:10:49"))
    report = recover(error_files=[oom], summaries=[SummaryBlock("run.log", tuple(summary.splitlines()), 1)])
    assert report.root_cause is not None and report.root_cause.rank == 1


def _epoch(stamp: str) -> int:
    return int(datetime.datetime.strptime(stamp, "%Y-%m-%d_%H:%M:%S").timestamp())


def test_a_rank_that_raised_its_own_error_counts_even_if_the_launcher_sigtermed_it(
    tmp_path: Path,
) -> None:
    """Rank 1 raised the NCCL error and was SIGTERMed by torchrun while exiting (-15);
    rank 0 died of the closed connection (SIGABRT) and is torchrun's root cause."""
    summary = _KILL_RACE_SUMMARY.replace("-9 (pid: 708)", "-15 (pid: 708)").replace(
        "error_file: <N/A>", f"error_file: {tmp_path}/attempt_0/1/error.json").replace(
        "-15 (pid: 707)", "-6 (pid: 707)").replace(
        "error_file: /tmp/attempt/0/error.json", f"error_file: {tmp_path}/attempt_0/0/error.json")
    files = [
        _error_file(tmp_path, 0, "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553]"
                    " Connection closed by peer [127.0.0.1]:16307", _epoch("2026-11-21_07:10:48")),
        _error_file(tmp_path, 1, "torch.distributed.DistBackendError: NCCL error in: "
                    "ProcessGroupNCCL.cpp:1970, ncclRemoteError: ...", _epoch("2026-11-21_07:10:49")),
    ]
    report = recover(error_files=files, summaries=[SummaryBlock("run.log", tuple(summary.splitlines()), 1)])
    assert report.root_cause is not None and report.root_cause.rank == 1


def test_a_sigtermed_root_cause_stands_when_every_rank_was_sigtermed() -> None:
    lines = tuple(_KILL_RACE_SUMMARY.replace("-9 (pid: 708)", "-15 (pid: 708)").splitlines())
    report = recover(summaries=[SummaryBlock("run.log", lines, 1)])
    assert report.root_cause is not None and report.root_cause.rank == 0


def test_summary_fields_outside_a_table_are_not_failures() -> None:
    assert parse_failure_summary(["time : 3.2 s", "rank : 4", "exitcode : 1 (pid: 5)"]) == []


def test_root_cause_without_table_prefers_earliest_non_sigterm(tmp_path: Path) -> None:
    files = []
    for rank, message, ts in [(0, "RuntimeError: SIGTERM received", 100), (1, "KeyError: 'a'", 105), (2, "ValueError: b", 103)]:
        path = tmp_path / "attempt_0" / str(rank) / "error.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"message": {"message": message, "extraInfo": {"timestamp": str(ts)}}, "errorCode": -15 if rank == 0 else 1}))
        files.append(path)
    report = recover(error_files=files)
    assert report.root_cause_rank == 2  # rank 0 was only SIGTERMed by the agent


def test_evidence_from_the_supervisor_uses_summary_lines_and_stop_flags() -> None:
    lines = (FIXTURES / "megatron-16-torchrun.log").read_text().splitlines()
    scanner = LineScanner(RULES)
    for line in lines:
        scanner.feed(line, "stderr")
    diagnosis = classify(Evidence(exit_code=1, hits=scanner.hits, launcher_summary_lines=tuple(lines[-60:]),
                                  launcher="torchrun"), RULES)
    assert (diagnosis.rule_id, diagnosis.root_cause_rank, diagnosis.exclude_node) == ("megatron-rerun-16", 3, True)
    assert dict(diagnosis.rank_exit_codes) == {3: 16, 4: -15, 5: -15}
    assert "rank 3, exit 16 (hidden by the launcher)" in diagnosis.status
    stopped = classify(Evidence(exit_code=None, signal=15, stop_signal="SIGTERM"), RULES)
    assert (stopped.rule_id, stopped.counts_as_failure) == ("preempted", False)
    hung = classify(Evidence(exit_code=None, signal=9, hung=True), RULES)
    assert (hung.rule_id, hung.category) == ("hang-detected", "hang")
    finished = classify(Evidence(exit_code=0, expect_finished=True, finished=True), RULES)
    assert finished.decision == "complete"
    unfinished = classify(Evidence(exit_code=0, expect_finished=True, finished=False), RULES)
    assert (unfinished.decision, unfinished.counts_as_failure) == ("reschedule", False)


def test_recover_summary_blocks_from_several_logs() -> None:
    lines = (FIXTURES / "cuda-oom.log").read_text().splitlines()
    report = recover(summaries=[SummaryBlock("a.log", tuple(lines), 1), SummaryBlock("b.log", ("noise",), 1)])
    assert report.root_cause is not None and report.root_cause.exception_type == "torch.OutOfMemoryError"


_WORKER = textwrap.dedent("""
    import os, sys, time
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        rank = int(os.environ["RANK"])
        print(f"rank {rank} step 1", flush=True)
        if rank == 1:
            time.sleep(0.3)
            if sys.argv[1] == "exit16":
                print("Unexpected result nan reproduced on the same GPU. Saving a checkpoint and exiting now...", flush=True)
                sys.exit(16)
            raise ValueError("bad config: lr must be > 0")
        time.sleep(30)

    main()
""")


def run_torchrun(tmp_path: Path, mode: str) -> tuple[int, Path, list[Path]]:
    script = tmp_path / "train.py"
    script.write_text(_WORKER)
    log = tmp_path / "torchrun.log"
    logs_dir = tmp_path / "elastic"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(log, "w") as out:
        code = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--log-dir", str(logs_dir),
             "--master-port", "0", str(script), mode],
            stdout=out, stderr=subprocess.STDOUT, env=env, timeout=120, check=False,
        ).returncode
    return code, log, sorted(logs_dir.rglob("error.json"))


@pytest.mark.e2e
@pytest.mark.torch
def test_real_torchrun_hides_exit_16_and_we_recover_it(tmp_path: Path) -> None:
    code, log, error_files = run_torchrun(tmp_path, "exit16")
    assert code == 1  # torchrun turned the worker's 16 into 1
    diagnosis = classify_artifacts(logs=[log], error_files=error_files, exit_code=code, signal=None, rules=RULES)
    assert diagnosis.rule_id == "megatron-rerun-16" and diagnosis.decision == "reschedule"
    assert diagnosis.root_cause_rank == 1 and diagnosis.rank_exit_codes[1] == 16
    assert diagnosis.exclude_node


@pytest.mark.e2e
@pytest.mark.torch
def test_real_torchrun_error_file_names_the_python_error(tmp_path: Path) -> None:
    code, log, error_files = run_torchrun(tmp_path, "valueerror")
    assert code == 1 and error_files
    # from the error files alone (no log): the exception type decides
    diagnosis = classify_artifacts(logs=[], error_files=error_files, exit_code=code, signal=None, rules=RULES)
    assert (diagnosis.rule_id, diagnosis.decision, diagnosis.root_cause_rank) == ("python-user-error", "abort", 1)
    with_log = classify_artifacts(logs=[log], error_files=error_files, exit_code=code, signal=None, rules=RULES)
    assert with_log.root_cause_rank == 1 and with_log.rank_exit_codes[1] == 1
    assert any("ValueError: bad config" in e.text for e in with_log.evidence)


def test_launcher_own_error_file_has_no_rank_and_does_not_merge_with_rank_0(tmp_path: Path) -> None:
    own = tmp_path / "error.json"
    own.write_text(json.dumps({"message": {"message": "KeyError: 'x'", "extraInfo": {"timestamp": "10"}}, "errorCode": 1}))
    rank0 = tmp_path / "logs" / "attempt_0" / "0" / "error.json"
    rank0.parent.mkdir(parents=True)
    rank0.write_text(json.dumps({"message": {"message": "RuntimeError: other", "extraInfo": {"timestamp": "12"}}}))
    report = recover(error_files=[own, rank0])
    assert len(report.failures) == 2
    assert report.rank_exit_codes == {}  # rank 0's file holds no code; the launcher's names no rank
    assert report.root_cause is not None and report.root_cause.exception_type == "KeyError"


def _wait_for_text(path: Path, *texts: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(text in path.read_text() for text in texts):
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} did not show {texts} within {timeout} s: {path.read_text()[-2000:]}")


_LOOPING_WORKER = textwrap.dedent("""
    import os, time
    print(f"rank {os.environ['RANK']} step 1", flush=True)
    time.sleep(120)
""")


@pytest.mark.e2e
@pytest.mark.torch
@pytest.mark.parametrize(("sig", "rule", "decision"), [
    (signal.SIGHUP, "terminal-hangup", "retry"),  # the session torchrun ran under closed
    (signal.SIGTERM, "preempted", "reschedule"),  # a scheduler's stop
])
def test_real_torchrun_agent_signal_decides_by_which_signal(tmp_path: Path, sig: signal.Signals, rule: str,
                                                            decision: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(_LOOPING_WORKER)
    log = tmp_path / "torchrun.log"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(log, "w") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "0",
             str(script)], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            _wait_for_text(log, "rank 0 step 1", "rank 1 step 1")  # the agent watches its workers now
            agent.send_signal(sig)  # to the agent only, as a closed terminal or a scheduler would
            code = agent.wait(timeout=60)
        finally:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
    assert code != 0
    diagnosis = classify_artifacts(logs=[log], error_files=[], exit_code=code, signal=None, rules=RULES)
    assert (diagnosis.rule_id, str(diagnosis.decision)) == (rule, decision), log.read_text()[-2000:]
