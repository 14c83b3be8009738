"""A real Lightning training (ModelCheckpoint(every_n_train_steps, save_last=True),
fit(ckpt_path="last")) under `resched wrap`, nothing of resched inside it
(tests/framework_trainings/lightning_train.py).

Issue 19, part 2: a step counts complete only once what fit(ckpt_path="last") loads
exists and holds it. The save is torn deterministically by the script's env-gated test
hook: SIGKILL after ModelCheckpoint wrote `epoch=0-step=N.ckpt`, before `last.ckpt`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervise_fixtures import REPO, child_env
from wrapper.checkpoint.layouts import inspect_layout

pytest.importorskip("lightning")
pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parent / "framework_trainings" / "lightning_train.py"
STARTS = re.compile(r"lightning-train: training starts at global step (\d+)")


def _argv(ck: Path, mode: str) -> list[str]:
    return [sys.executable, str(SCRIPT), str(ck), "12", "4", *(["link"] if mode == "link" else [])]


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("lt-clean")
    done = subprocess.run(_argv(root / "ck", "copy"), cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return (root / "final.pt").read_bytes()


@pytest.mark.parametrize("mode", ["copy", pytest.param("link", marks=pytest.mark.slow)])
def test_killed_between_the_step_file_and_last_ckpt(tmp_path: Path, fault_free: bytes,
                                                    mode: str) -> None:
    ck = tmp_path / "ck"
    env = child_env() | {"TEAR_LAST_AT": "8", "TEAR_ONCE": str(tmp_path / "torn-once")}
    done = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(tmp_path / "state"),
         "--checkpoint-dir", str(ck), "--node", "node-a", "--", *_argv(ck, mode)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    records = [json.loads(p.read_text())
               for p in sorted((tmp_path / "state" / "attempts").glob("*.json"))]
    assert [r["decision"] for r in records] == ["retry", "complete"]
    # what resched counted after the kill = what Lightning resumed from (its own step)
    assert records[0]["checkpoint_step_after"] == 4
    assert [int(s) for s in STARTS.findall(done.stdout)] == [0, 4]
    moved = records[1]["checkpoint_set_aside"]["moved"]
    assert [m["path"] for m in moved] == ["epoch=0-step=8.ckpt"]
    assert (tmp_path / "final.pt").read_bytes() == fault_free
    assert inspect_layout(ck).step == 12
