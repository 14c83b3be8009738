"""examples/frameworks/dcp_train.py (torch.distributed.checkpoint, 2 gloo ranks under
torchrun, nothing of resched in it) under `resched wrap`: its step folders are its
progress, and a gloo teardown that hangs after the finished flag was written (most runs
on this CPU torch) ends as complete after --teardown-timeout instead of a 300 s hang."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervise_fixtures import REPO, child_env

pytestmark = [pytest.mark.e2e, pytest.mark.torch]

TORCHRUN = str(Path(sys.executable).parent / "torchrun")


@pytest.mark.skipif(shutil.which(TORCHRUN) is None, reason="torchrun not installed")
def test_dcp_training_under_wrap_completes_whatever_its_teardown_does(tmp_path: Path) -> None:
    out, flag = tmp_path / "dcp", tmp_path / "FINISHED"
    done = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(tmp_path / "state"),
         "--checkpoint-dir", str(out), "--expect-finished-flag", str(flag),
         "--teardown-timeout", "2", "--hang-timeout", "60", "--node", "n1", "--",
         TORCHRUN, "--standalone", "--nproc-per-node", "2",
         str(REPO / "examples" / "frameworks" / "dcp_train.py"), "--output-dir", str(out),
         "--max-steps", "30", "--save-steps", "10"],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "state" / "attempts").glob("*.json")]
    assert record["decision"] == "complete"
    assert record["checkpoint_step_after"] == 30  # the newest step_N/ with its .metadata
    assert flag.read_text().strip() == "30"
    if "teardown" in record:  # the gloo teardown hung: ended, with the evidence
        assert "finished-flag" in record["teardown"]["finished_line"]
        assert record["teardown"]["ended_after_s"] >= 2.0
