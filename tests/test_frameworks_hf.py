"""A real Hugging Face Trainer (tiny GPT-2 from config, CPU) under `resched wrap`, with
nothing of resched inside it (tests/framework_trainings/hf_trainer.py); faults from the
test hook (tests/framework_fixtures.py). 12 steps, a checkpoint every 4.

Issue 19, part 1: a save torn inside `checkpoint-N/` (no trainer_state.json yet) used to
be picked by get_last_checkpoint on the retry in place; HF crashed loading it and the
wrapper aborted. For every fault: the step HF resumed from (its own log line) is the
newest whole checkpoint, the one resched recorded, and the final weights equal a
fault-free run's bit for bit.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.framework_fixtures import MATRIX, RESCHEDULE, Fault, needs, run_with_fault
from tests.supervise_fixtures import REPO, child_env

pytestmark = [needs("transformers"), pytest.mark.e2e]

SCRIPT = Path(__file__).parent / "framework_trainings" / "hf_trainer.py"
RESUMED = re.compile(r"Resuming training from checkpoint with epoch \d+ and global step (\d+)")


def _argv(out: Path) -> list[str]:
    return [sys.executable, str(SCRIPT), str(out), "12", "4"]


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("hf-clean") / "out"
    done = subprocess.run(_argv(out), cwd=REPO, env=child_env(), capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return (out / "final" / "model.safetensors").read_bytes()


TORN_8 = r"checkpoint-8/trainer_state\.json "  # weights, optimizer, rng written; state not
# (fault, step reached when it hit, step HF resumes from, what the relaunch moves aside)
CASES = [
    pytest.param(Fault("torn-in-place", f"kill:open:{TORN_8}", new_pod=False), 8, 4,
                 ["checkpoint-8"], id="torn-in-place"),
    pytest.param(Fault("kill", r"kill:line:'epoch': '0\.625'", new_pod=False), 10, 8, [],
                 id="kill", marks=MATRIX),
    pytest.param(Fault("term", r"term:line:'epoch': '0\.625'", new_pod=True), 10, 8, [],
                 id="term-new-pod", marks=MATRIX),
    pytest.param(Fault("torn-new-pod", f"kill:open:{TORN_8}", new_pod=True), 8, 4, [],
                 id="torn-new-pod", marks=MATRIX),
    pytest.param(Fault("stop-during-save", f"term:open:{TORN_8}", new_pod=True), 8, 4, [],
                 id="stop-during-save", marks=MATRIX),
]


@pytest.mark.parametrize(("fault", "reached", "resumed", "moved"), CASES)
def test_fault_resumes_from_the_newest_whole_checkpoint(
        tmp_path: Path, fault_free: bytes, fault: Fault, reached: int, resumed: int,
        moved: list[str]) -> None:
    out = run_with_fault(tmp_path, SCRIPT, _argv, fault)
    assert out.codes == ((RESCHEDULE, 0) if fault.new_pod else (0,)), out.output[-4000:]
    # the framework's own log: where HF resumed
    assert [int(s) for s in RESUMED.findall(out.output)] == [resumed]
    last = out.records[-1]
    assert last["decision"] == "complete"
    assert last["checkpoint_step_before"] == resumed  # what resched says = what HF did
    assert [r["decision"] for r in out.records[:-1]] == (
        ["reschedule"] if fault.new_pod else ["retry"])
    set_aside = last.get("checkpoint_set_aside", {})
    assert [m["path"] for m in set_aside.get("moved", [])] == moved
    if moved:  # kept, with its reason, nothing deleted
        torn = out.directory / set_aside["torn_set"] / "checkpoint-8"
        assert (torn / "optimizer.pt").is_file() and not (torn / "trainer_state.json").exists()
        assert "trainer_state.json" in set_aside["moved"][0]["why"]
    # a new pod never gets the torn save back into the training's directory
    assert not (out.directory / ".resched-torn").exists() or not fault.new_pod
    assert (out.directory / "final" / "model.safetensors").read_bytes() == fault_free
    print(f"HF {fault.name}: reached {reached}, resumed {resumed} (HF log), lost "
          f"{reached - resumed}, weights equal")
