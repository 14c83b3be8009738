"""The optional integrations with the real frameworks on tiny models, without resched's
CLI: exact step lines, the finish line and finished flag, and a save on the stop signal
(the examples in examples/frameworks/ are what runs)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervise_fixtures import REPO, child_env

pytestmark = pytest.mark.e2e

EXAMPLES = REPO / "examples" / "frameworks"
CASES = {
    "hf": ("hf_trainer.py", ["--callback"]),  # ~15-25 s on 2 busy cores: marked slow below
    "lightning": ("lightning_train.py", ["--callback"]),
    "loop": ("plain_loop.py", []),
}


def _start(tmp_path: Path, name: str, *args: str) -> subprocess.Popen[str]:
    script, extra = CASES[name]
    env = child_env(FAULT_TOL_FINISHED_FLAG_FILE=str(tmp_path / "finished.flag"))
    return subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), "--output-dir", str(tmp_path / "out"),
         *extra, *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True)


NAMES = [pytest.param(n, marks=pytest.mark.slow) if n == "hf" else n for n in sorted(CASES)]


@pytest.mark.parametrize("name", NAMES)
def test_every_step_the_finish_line_and_the_flag(tmp_path: Path, name: str) -> None:
    proc = _start(tmp_path, name, "--max-steps", "12", "--save-steps", "5")
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0
    steps = [int(s) for s in re.findall(r"^resched-train: step (\d+)$", out, re.M)]
    assert steps == list(range(1, 13))
    assert "resched-train: finished at step 12" in out
    assert (tmp_path / "finished.flag").read_text().strip() == "12"


@pytest.mark.parametrize("name", NAMES)
def test_stop_signal_saves_at_the_step_boundary_and_leaves(tmp_path: Path, name: str) -> None:
    proc = _start(tmp_path, name, "--max-steps", "500", "--save-steps", "1000",
                  "--step-time", "0.05")
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("resched-train: step 3"):
            break
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    saved = re.findall(r"^resched-train: checkpoint step (\d+)$", out, re.M)
    assert len(saved) == 1 and 3 <= int(saved[0]) < 500
    assert "finished at step" not in out and not (tmp_path / "finished.flag").exists()
    step = int(saved[0])
    out_dir = tmp_path / "out"
    if name == "hf":
        assert (out_dir / f"checkpoint-{step}" / "trainer_state.json").is_file()
    elif name == "lightning":
        import torch

        assert torch.load(out_dir / "last.ckpt", weights_only=False)["global_step"] == step
    else:
        import torch

        assert torch.load(out_dir / "model.pt")["step"] == step
