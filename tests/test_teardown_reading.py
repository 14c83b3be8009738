"""A crash or hang after the process began to exit, with nothing failed before, is teardown:
complete. An error before the exit line, an exit code the program chose, a launcher naming
a rank's exception, or progress naming an end not reached keep the failure."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.supervise_fixtures import REPO, child_env
from wrapper.classifier import load_rules
from wrapper.classifier.verdict import classify_artifacts
from wrapper.decision import Decision

RULES = load_rules()

EPOCHS = "".join(f"Epoch {i}/3: 100%|##########| 20/20 [00:01<00:00, loss=0.{9 - i}]\n" for i in range(3))
PG_WARNING_24 = ("[rank0]:[W310 01:07:17.234745149 ProcessGroupNCCL.cpp:1250] Warning: WARNING: "
                 "process group has NOT been destroyed before we destruct ProcessGroupNCCL. On "
                 "normal program exit, the application should call destroy_process_group\n")
PG_WARNING_25 = ("[rank0]:[W1007 09:55:53.400347903 ProcessGroupNCCL.cpp:1496] Warning: WARNING: "
                 "destroy_process_group() was not called before program exit, which can leak "
                 "resources.\n")
CUDA_UNLOADING = ("terminate called after throwing an instance of 'c10::Error'\n"
                  "  what():  CUDA error: driver shutting down\n"
                  "Exception raised from query at aten/src/ATen/cuda/CUDAEvent.h:95\n")
WANDB_FOOTER = ("wandb: Run history:\nwandb:   train/loss ██▆▅▃▂▁\nwandb: Run summary:\n"
                "wandb:   train/loss 0.7\nwandb: Synced 5 W&B file(s), 0 media file(s)\n")
TRACEBACK = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
             "    main()\nRuntimeError: mat1 and mat2 shapes cannot be multiplied\n")


def _judge(tmp_path: Path, text: str, **status: object):
    log = tmp_path / "run.log"
    log.write_text(text)
    kwargs = {"exit_code": None, "signal": None, **status}
    return classify_artifacts(logs=[log], error_files=[], rules=RULES, **kwargs)


@pytest.mark.parametrize(("text", "status"), [
    (EPOCHS + PG_WARNING_24, {}),                                   # saved log, no status
    (EPOCHS + PG_WARNING_25 + CUDA_UNLOADING, {"signal": 6}),      # abort in a destructor
    (EPOCHS + CUDA_UNLOADING, {"exit_code": 134}),
    (EPOCHS + CUDA_UNLOADING, {}),
    (EPOCHS + WANDB_FOOTER, {"hung": True}),                       # hang in destroy
    (EPOCHS + PG_WARNING_24 + "Segmentation fault (core dumped)\n", {"exit_code": 139}),
])
def test_a_crash_or_hang_after_the_exit_began_is_teardown(tmp_path: Path, text: str,
                                                          status: dict) -> None:
    diagnosis = _judge(tmp_path, text, **status)
    assert diagnosis.decision is Decision.COMPLETE, diagnosis.why_won
    assert diagnosis.rule_id in {"process-exited", "exit-cuda-unloading", "exit-tracker-footer"}


@pytest.mark.parametrize(("text", "status"), [
    # the exception came first: the exit line is its consequence
    (EPOCHS + TRACEBACK + PG_WARNING_24, {}),
    (EPOCHS + TRACEBACK + WANDB_FOOTER, {"hung": True}),
    (EPOCHS + TRACEBACK + CUDA_UNLOADING, {"signal": 6}),
    # an exit code the program chose is its verdict, whatever it printed on the way out
    (EPOCHS + PG_WARNING_24, {"exit_code": 1}),
    (EPOCHS + PG_WARNING_24 + CUDA_UNLOADING, {"exit_code": 2}),
    # killed from outside: no teardown crash
    (EPOCHS + PG_WARNING_24, {"signal": 9}),
    # a stop request decides (preemption)
    (EPOCHS + PG_WARNING_24, {"signal": 6, "stop_signal": "SIGTERM"}),
])
def test_a_failure_before_or_around_the_exit_line_is_no_teardown(tmp_path: Path, text: str,
                                                                 status: dict) -> None:
    assert _judge(tmp_path, text, **status).decision is not Decision.COMPLETE


def test_progress_that_names_an_end_not_reached_is_no_teardown(tmp_path: Path) -> None:
    text = " iteration       50/     100 | consumed samples: 400 | lm loss: 2.1\n" + CUDA_UNLOADING
    # progress is read from the log itself (Megatron's iteration line)
    assert _judge(tmp_path, text, signal=6).decision is not Decision.COMPLETE


# A real process: prints its epochs and the exit-time warning, then aborts in "teardown".
ABORTS_AT_EXIT = textwrap.dedent("""
    import os, sys
    sys.stdout.write(sys.argv[1]); sys.stdout.flush()
    os.abort()
""")


@pytest.mark.e2e
def test_wrap_counts_an_abort_after_the_exit_line_complete(tmp_path: Path) -> None:
    state = tmp_path / "state"
    done = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(state), "--node", "n1",
         "--max-retries", "1", "--", sys.executable, "-c", ABORTS_AT_EXIT,
         EPOCHS + PG_WARNING_24 + CUDA_UNLOADING],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    records = sorted((state / "attempts").glob("*.json"))
    assert len(records) == 1  # not retried
    record = json.loads(records[0].read_text())
    assert record["decision"] == "complete"
    assert record["signal"] == 6


@pytest.mark.e2e
def test_wrap_retries_an_abort_after_an_error(tmp_path: Path) -> None:
    state = tmp_path / "state"
    done = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(state), "--node", "n1",
         "--max-retries", "0", "--max-reschedules", "0", "--", sys.executable, "-c",
         ABORTS_AT_EXIT, EPOCHS + "NCCL WARN Cuda failure 'an illegal memory access was "
         "encountered'\n" + PG_WARNING_24 + CUDA_UNLOADING],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    record = json.loads(max((state / "attempts").glob("*.json")).read_text())
    assert record["decision"] != "complete"

