"""A real Hugging Face Trainer (tiny GPT-2 from config, CPU) under `resched wrap`, with
nothing of resched inside it (tests/framework_trainings/hf_trainer.py).

Issue 19, part 1: a save torn inside `checkpoint-N/` (no trainer_state.json yet) used to
be picked by get_last_checkpoint on the retry in place; the training crashed loading it
and the wrapper aborted. Now the pre-launch check moves it aside and the retry resumes
from the newest whole checkpoint; the final weights equal a fault-free run's.

How the save is torn, deterministically: the training script's env-gated test hook
(TEAR_SAVE_AT / TEAR_ONCE) SIGKILLs the process right after torch.save wrote
`checkpoint-N/optimizer.pt` (weights there, trainer_state.json not yet), once.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervise_fixtures import REPO, child_env

pytest.importorskip("transformers")
pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parent / "framework_trainings" / "hf_trainer.py"
RESUMED = re.compile(r"Resuming training from checkpoint with epoch \d+ and global step (\d+)")
MAX_STEPS, SAVE_STEPS = 12, 4


def _train(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(out), str(MAX_STEPS), str(SAVE_STEPS)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def _wrap(tmp_path: Path, out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(tmp_path / "state"),
         "--checkpoint-dir", str(out), "--node", "node-a", "--",
         sys.executable, str(SCRIPT), str(out), str(MAX_STEPS), str(SAVE_STEPS)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    out = tmp_path_factory.mktemp("hf-clean") / "out"
    done = _train(out, child_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return (out / "final" / "model.safetensors").read_bytes()


def test_a_save_torn_in_place_resumes_from_the_last_whole_checkpoint(
        tmp_path: Path, fault_free: bytes) -> None:
    out = tmp_path / "out"
    env = child_env() | {"TEAR_SAVE_AT": "8", "TEAR_ONCE": str(tmp_path / "torn-once")}
    done = _wrap(tmp_path, out, env)
    assert done.returncode == 0, done.stderr[-4000:]
    records = [json.loads(p.read_text())
               for p in sorted((tmp_path / "state" / "attempts").glob("*.json"))]
    assert [r["decision"] for r in records] == ["retry", "complete"]
    moved = records[1]["checkpoint_set_aside"]
    assert [m["path"] for m in moved["moved"]] == ["checkpoint-8"]
    assert "trainer_state.json" in moved["moved"][0]["why"]
    # the framework's own log: resumed from step 4 (the whole one), not the torn 8
    assert [int(s) for s in RESUMED.findall(done.stdout + done.stderr)] == [4]
    assert records[1]["checkpoint_step_before"] == 4  # what resched says = what HF did
    # the torn save is kept, once, with its reason; nothing of it was deleted
    torn = out / moved["torn_set"]
    assert (torn / "checkpoint-8" / "optimizer.pt").is_file()
    assert not (torn / "checkpoint-8" / "trainer_state.json").exists()
    assert json.loads((torn / "resched-torn.json").read_text())["moved"][0]["path"] == "checkpoint-8"
    assert (out / "final" / "model.safetensors").read_bytes() == fault_free


@pytest.mark.slow
def test_killed_outside_a_save_resumes_from_the_newest_checkpoint(
        tmp_path: Path, fault_free: bytes) -> None:
    out = tmp_path / "out"
    # torn once at step 12's save after optimizer.pt: the newest whole one is 8
    env = child_env() | {"TEAR_SAVE_AT": "12", "TEAR_ONCE": str(tmp_path / "torn-once")}
    done = _wrap(tmp_path, out, env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert [int(s) for s in RESUMED.findall(done.stdout + done.stderr)] == [8]
    assert (out / "final" / "model.safetensors").read_bytes() == fault_free
