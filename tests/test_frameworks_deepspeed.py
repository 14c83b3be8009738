"""A real DeepSpeed training (ZeRO stage 1, 2 ranks on CPU over gloo under torchrun)
under `resched wrap`, nothing of resched inside it (tests/framework_trainings/
deepspeed_train.py). 12 steps, save_checkpoint every 4, load_checkpoint reads `latest`.

Rank 0 writes `latest` without waiting for the other ranks, so a rank that dies inside
its save can leave `latest` naming a torn `global_stepN/` (DeepSpeed never falls back by
itself). Here rank 1 is killed as it makes the folder of step 8 (its optimizer file never
exists; whether rank 0 got to `latest` first is up to the race, and either way the
relaunch must resume from step 4). Slow: DeepSpeed builds its CPU shared-memory op with
g++ on first use (~60 s once, cached in ~/.cache/torch_extensions), ~11 s a run after.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from local_fixtures import free_port

from tests.framework_fixtures import MATRIX, RESCHEDULE, Fault, run_with_fault
from tests.supervise_fixtures import REPO, child_env

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.e2e, *MATRIX]

SCRIPT = Path(__file__).parent / "framework_trainings" / "deepspeed_train.py"
LOADED = re.compile(r"deepspeed-train: rank 0 loaded \S+ at global step (\d+)")
ENV = {"DS_ACCELERATOR": "cpu"}


def _argv(ck: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
            str(SCRIPT), str(ck), "12", "4"]


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("ds-clean")
    done = subprocess.run(_argv(root / "ck"), cwd=REPO, env=child_env(**ENV),
                          capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return (root / "final.pt").read_bytes()


# torch.save(path) opens its file in C++ (no audit event); DeepSpeed makes the tag folder
# on every rank first (os.makedirs): rank 1 dies there and never writes its file of step 8
RANK1_STEP8 = r"os.mkdir:/global_step8 "


@pytest.mark.parametrize("fault", [
    Fault("torn-in-place", f"kill:{RANK1_STEP8}", False),
    Fault("torn-new-pod", f"kill:{RANK1_STEP8}", True),
], ids=lambda f: f.name)
def test_a_rank_killed_inside_its_save_resumes_from_the_last_whole_tag(
        tmp_path: Path, fault_free: bytes, fault: Fault) -> None:
    out = run_with_fault(tmp_path, SCRIPT, _argv, fault, FAULT_RANK="1", **ENV)
    assert out.codes == ((RESCHEDULE, 0) if fault.new_pod else (0,)), out.output[-4000:]
    assert [int(s) for s in LOADED.findall(out.output)] == [0, 4]  # DeepSpeed's global_steps
    last = out.records[-1]
    assert last["decision"] == "complete" and last["checkpoint_step_before"] == 4
    if not fault.new_pod:
        set_aside = last["checkpoint_set_aside"]
        assert "global_step8" in [m["path"] for m in set_aside["moved"]]
        assert (out.directory / "latest").read_text() in ("global_step12",)
    assert (out.directory.parent / "final.pt").read_bytes() == fault_free
