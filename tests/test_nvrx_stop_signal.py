"""`resched wrap --stop-signal`: whatever stop arrives, the training gets the one it saves on.

Real processes and signals; the trainings are plain Python scripts that only know the
signal their framework listens for (Megatron / NeMo / torchrun: TERM, Lightning: USR1).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.supervise_fixtures import REPO, child_env, wait_for_file

pytestmark = pytest.mark.e2e

# A training loop that saves (the checkpoint marker, written last) only on SIG<NAME>;
# any other signal kills it with the default action, as in the reproduction.
TRAINING = '''
import os, signal, sys, time
from wrapper.checkpoint.marker import mark_complete
ckpt, ready, name = sys.argv[1], sys.argv[2], sys.argv[3]
step = 0
def save_and_exit(signum, frame):
    mark_complete(ckpt, step)
    # os.write: the loop may be inside its own print to stdout when the signal lands, and
    # a print here would then raise "reentrant call" (exit 1 after the save)
    os.write(1, f"saved step {step} on {signal.Signals(signum).name}\\n".encode())
    sys.exit(0)
if name != "none":
    signal.signal(getattr(signal, "SIG" + name), save_and_exit)
while True:
    step += 1
    print(f"step {step}", flush=True)
    if step == 5:
        open(ready, "w").write("ready")
    time.sleep(0.02)
'''


def stop_wrapped_training(tmp_path: Path, *, handles: str, send: signal.Signals,
                          options: tuple[str, ...] = ()) -> tuple[int, str, dict[str, Any]]:
    script = tmp_path / "train.py"
    script.write_text(TRAINING)
    ckpt, state, ready = tmp_path / "ckpt", tmp_path / "state", tmp_path / "ready"
    ckpt.mkdir()
    argv = [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(state),
            "--node", "node-a", "--grace", "10", "--checkpoint-dir", str(ckpt), *options,
            "--", sys.executable, str(script), str(ckpt), str(ready), handles]
    wrapper = subprocess.Popen(argv, cwd=REPO, env=child_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_for_file(ready)
    wrapper.send_signal(send)
    _, stderr = wrapper.communicate(timeout=60)
    (record_path,) = sorted((state / "attempts").glob("*.json"))
    return wrapper.returncode, stderr, json.loads(record_path.read_text())


@pytest.mark.parametrize("send", [signal.SIGUSR1, signal.SIGHUP, signal.SIGINT])
def test_any_stop_reaches_a_term_only_training_as_term(tmp_path: Path, send: signal.Signals) -> None:
    code, stderr, record = stop_wrapped_training(tmp_path, handles="TERM", send=send)
    assert code == 3, stderr
    assert (record["rule"], record["category"], record["counts_as_failure"]) == (
        "preempted", "preemption", False)
    assert record["stop_signal"] == send.name and record["stop_saved"] is True
    assert record["exit_code"] == 0 and record["checkpoint_step_after"] >= 5, (record, stderr)
    assert record["steps_lost"] == 0


def test_lightning_sets_stop_signal_usr1(tmp_path: Path) -> None:
    code, stderr, record = stop_wrapped_training(
        tmp_path, handles="USR1", send=signal.SIGTERM, options=("--stop-signal", "USR1"))
    assert code == 3, stderr
    assert record["stop_saved"] is True and record["exit_code"] == 0


def test_a_stop_that_did_not_save_is_recorded_as_lost_steps(tmp_path: Path) -> None:
    # The training listens for USR1 only, the wrapper forwards TERM: it dies unsaved.
    code, stderr, record = stop_wrapped_training(tmp_path, handles="USR1", send=signal.SIGTERM)
    assert code == 3, stderr  # still left for the orchestrator: it is stopping the task
    assert record["category"] == "stopped-unsaved" and record["stop_saved"] is False
    assert record["signal"] == signal.SIGTERM
    assert record["steps_lost"] >= 5
    assert record["reason"].startswith(f"stopped, {record['steps_lost']} steps lost")
    assert "did not save on SIGTERM" in stderr


def test_bad_stop_signal_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--stop-signal", "KILL", "--", "true"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "--stop-signal" in result.stderr


# A training that has finished (its flag written) and lingers (e.g. a final log flush)
# when the orchestrator stops the task, as OSMO/the local executor do with the other
# tasks once the lead completed. It exits 0 on TERM without a newer checkpoint.
FINISHED = '''
import signal, sys, time
flag, ready = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("step 100", flush=True)
open(flag, "w").write("done")
open(ready, "w").write("ready")
time.sleep(60)
'''


def test_a_stop_after_the_training_finished_loses_nothing(tmp_path: Path) -> None:
    script, flag, ready = tmp_path / "train.py", tmp_path / "finished", tmp_path / "ready"
    script.write_text(FINISHED)
    ckpt, state = tmp_path / "ckpt", tmp_path / "state"
    ckpt.mkdir()
    argv = [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(state),
            "--node", "node-a", "--grace", "10", "--checkpoint-dir", str(ckpt),
            "--expect-finished-flag", str(flag), "--", sys.executable, str(script),
            str(flag), str(ready)]
    wrapper = subprocess.Popen(argv, cwd=REPO, env=child_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_for_file(ready)
    wrapper.send_signal(signal.SIGTERM)
    _, stderr = wrapper.communicate(timeout=60)
    (record_path,) = sorted((state / "attempts").glob("*.json"))
    record = json.loads(record_path.read_text())
    assert record["decision"] == "complete", (record, stderr)
    assert record["steps_lost"] == 0 and record["category"] != "stopped-unsaved"
    assert "steps lost" not in record["reason"] and "did not save" not in stderr
    assert record["stop_summary"] == "stopped after the training had finished"
