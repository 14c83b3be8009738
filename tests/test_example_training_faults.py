"""examples/ddp_train.py --fault: what each injected fault leaves behind under torchrun
(exit codes, log text, error files), how resched's rules classify it, and --fail-once-file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from example_training_fixtures import (
    RESUMED_RE,
    STEP_RE,
    TRAIN_ARGS,
    FinishedRun,
    Launcher,
    TrainRun,
    launcher_fixture,  # noqa: F401 - registers the fixture
    reference_run_fixture,  # noqa: F401 - registers the fixture
    steps_of,
)

from wrapper.checkpoint.marker import read_marker
from wrapper.classifier import classify_artifacts
from wrapper.classifier.rules import load_rules

pytestmark = [pytest.mark.torch, pytest.mark.e2e]

FAIL_AT, FAIL_RANK = 13, 1
# fault -> (the failing rank's exit code as torchrun reports it, log texts, rules, decision)
NCCL_TEXT = "DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
EXIT16_TEXT = "Saving a checkpoint and exiting now. Please resume the job from the checkpoint"
EXPECTED = {
    "nccl": (1, [NCCL_TEXT, "ncclRemoteError"], {"nccl-error"}, "retry"),
    "exit16": (16, [EXIT16_TEXT], {"megatron-rerun-16"}, "reschedule"),
    "exit17": (17, ["Possible transient error!", "status=first_rerun_not_reproducible"],
               {"megatron-rerun-17-transient"}, "retry"),
    "oom": (1, ["OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"],
            {"cuda-oom"}, "abort"),
    # the peer's gloo "Connection reset" and torchrun's SIGTERM to it are cascades: the
    # root cause is the rank that was SIGKILLed (torchrun's own summary may name the peer)
    "kill": (-9, ["Signal 9 (SIGKILL) received by PID"], {"killed-by-signal"}, "retry"),
}
RANK_BLOCK_RE = re.compile(
    r"rank\s+: (\d+) \(local_rank: \d+\)\n\s+exitcode\s+: (-?\d+) .*\n\s+error_file: (\S+)")


def failure_table(text: str) -> dict[int, tuple[int, str]]:
    """torchrun's ChildFailedError summary: rank -> (exit code, error file or <N/A>)."""
    return {int(r): (int(code), path) for r, code, path in RANK_BLOCK_RE.findall(text)}


def classify_cli(log: Path, error_files: list[Path]) -> tuple[str, str]:
    """`resched classify` on the saved log, as a user would run it: (rule, decision)."""
    argv = [str(Path(sys.executable).parent / "resched"), "classify", "--log", str(log),
            "--exit-code", "1", "--format", "json"]
    for path in error_files:
        argv += ["--error-file", str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout)
    return verdict["rule"], verdict["decision"]


def run_fault(launcher: Launcher, ckpt: Path, kind: str, once: Path) -> TrainRun:
    return launcher.run(ckpt, *TRAIN_ARGS, "--step-time", "0", "--fault", kind,
                        "--fail-at-step", str(FAIL_AT), "--fail-rank", str(FAIL_RANK),
                        "--fail-once-file", str(once), name=kind)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_fault_leaves_the_evidence_the_rules_classify(
        launcher: Launcher, tmp_path: Path, kind: str,
        reference_run: tuple[FinishedRun, Path]) -> None:
    code, texts, rules, decision = EXPECTED[kind]
    ckpt, once = tmp_path / "ckpt", tmp_path / "fired-once"
    run = run_fault(launcher, ckpt, kind, once)
    text = run.text()
    assert run.proc.returncode == 1, text[-3000:]  # torchrun hides the worker's code...
    table = failure_table(text)
    if kind in ("exit16", "exit17"):  # every rank exits with it (or is stopped by torchrun)
        assert {c for c, _ in table.values()} in ({code}, {code, -15}), text[-3000:]
    else:  # ...but its summary names it. torchrun's SIGTERM to the group can overtake the
        # failing rank's own exit (-15); its error file still records what it raised.
        assert table[FAIL_RANK][0] in (code, -15), text[-3000:]
        if table[FAIL_RANK][0] == -15:
            assert table[FAIL_RANK][1] != "<N/A>", text[-3000:]
    for expected in texts:
        assert expected in text
    assert max(steps_of(STEP_RE, text)) == FAIL_AT - 1
    assert once.exists()
    error_files = [Path(p) for _, p in table.values() if p != "<N/A>"]
    if kind in ("nccl", "oom"):  # @record wrote the exception for torchrun
        record = json.loads(Path(table[FAIL_RANK][1]).read_text())
        assert texts[0] in record["message"]["message"]
    diagnosis = classify_artifacts(logs=[run.log], error_files=error_files, exit_code=1,
                                   signal=None, rules=load_rules())
    # torchrun may name the peer it SIGTERMed (exit -15) as root cause when the killed
    # rank has no error file; the recovery must still pick the SIGKILLed rank.
    assert diagnosis.rule_id in rules and diagnosis.decision == decision, diagnosis.to_json()
    assert classify_cli(run.log, error_files) == (diagnosis.rule_id, diagnosis.decision)
    if kind in ("exit16", "exit17"):  # every rank exits with Megatron's code
        assert diagnosis.root_cause_rank in table
        assert diagnosis.rank_exit_codes[diagnosis.root_cause_rank] == code
    else:
        assert diagnosis.root_cause_rank == FAIL_RANK
    # Megatron's exits save the state before the failing iteration first
    expected_marker = FAIL_AT - 1 if kind in ("exit16", "exit17") else 10
    assert read_marker(ckpt) == expected_marker
    if kind in ("exit16", "nccl"):  # one collective and one single-rank fault
        assert_once_file_lets_the_retry_finish(launcher, ckpt, kind, once, expected_marker,
                                               reference_run[0].checksum())


def assert_once_file_lets_the_retry_finish(launcher: Launcher, ckpt: Path, kind: str,
                                           once: Path, marker: int, reference: str) -> None:
    again = run_fault(launcher, ckpt, kind, once)  # the same command, as a retry runs it
    assert again.proc.returncode == 0, again.text()[-3000:]
    assert "injecting fault" not in again.text()
    assert steps_of(RESUMED_RE, again.text()) == [marker]
    assert again.checksum() == reference  # bit-exact with the fault-free run


def test_hang_stops_steps_and_heartbeats(launcher: Launcher, tmp_path: Path) -> None:
    beat = tmp_path / "heartbeat"
    run = launcher.start(tmp_path / "ckpt", *TRAIN_ARGS, "--step-time", "0.02", "--fault",
                         "hang", "--fail-at-step", "5", "--fail-rank", "0",
                         env={"RESCHED_HEARTBEAT_FILE": str(beat),
                              "RESCHED_HEARTBEAT_MIN_INTERVAL": "0"}, name="hang")
    run.wait_for(r"injecting fault hang at step 5 on rank 0")
    assert beat.exists()  # wrapper.heartbeat() ran while the steps did
    time.sleep(0.3)  # rank 1 beats once more at the start of step 5, then blocks in a collective
    touched = beat.stat().st_mtime_ns
    time.sleep(1.0)  # ~50 step times: a live training would have beaten and logged
    assert run.proc.poll() is None
    assert beat.stat().st_mtime_ns == touched
    assert max(steps_of(STEP_RE, run.text())) == 4
