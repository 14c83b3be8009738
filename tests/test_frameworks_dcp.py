"""A real 2-rank gloo torchrun training with torch.distributed.checkpoint under `resched
wrap`, nothing of resched inside it (tests/framework_trainings/dcp_train.py): it resumes
from the newest `step-N/` folder without checking it, as hand-written loops do. 12 steps,
a DCP save every 4. Faults from the test hook (tests/framework_fixtures.py), in one rank.

A save torn in rank 1 (its `__1_0.distcp` never written, so no `.metadata`) is moved
aside before the retry; the training resumes from the newest whole step; the final
weights equal a fault-free run's bit for bit.
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

pytestmark = pytest.mark.e2e

SCRIPT = Path(__file__).parent / "framework_trainings" / "dcp_train.py"
RESUMED = re.compile(r"dcp-train: rank 0 resumed from step (\d+)")


def _argv(ck: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
            str(SCRIPT), str(ck), "12", "4"]


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("dcp-clean")
    done = subprocess.run(_argv(root / "ck"), cwd=REPO, env=child_env(), capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return (root / "final.pt").read_bytes()


RANK1_STEP8 = r"open:step-8/__1_0\.distcp "  # rank 1 about to write its part of step 8
CASES = [
    pytest.param(Fault("torn-in-place", f"kill:{RANK1_STEP8}", False), 8, 4, ["step-8"],
                 id="torn-in-place", marks=MATRIX),
    pytest.param(Fault("torn-new-pod", f"kill:{RANK1_STEP8}", True), 8, 4, [],
                 id="torn-new-pod", marks=MATRIX),
    # rank 1 stops the pod (SIGTERM to the wrapper, two levels up: rank -> torchrun ->
    # wrapper) inside the save of step 8
    pytest.param(Fault("stop-during-save", f"term:{RANK1_STEP8}", True), 8, 4, [],
                 id="stop-during-save", marks=MATRIX),
]


@pytest.mark.parametrize(("fault", "reached", "resumed", "moved"), CASES)
def test_fault_in_one_rank_resumes_from_the_newest_whole_step(
        tmp_path: Path, fault_free: bytes, fault: Fault, reached: int, resumed: int,
        moved: list[str]) -> None:
    out = run_with_fault(tmp_path, SCRIPT, _argv, fault, FAULT_RANK="1", FAULT_TERM_UP="2")
    assert out.codes == ((RESCHEDULE, 0) if fault.new_pod else (0,)), out.output[-4000:]
    assert [int(s) for s in RESUMED.findall(out.output)] == [0, resumed]
    last = out.records[-1]
    assert last["decision"] == "complete" and last["checkpoint_step_before"] == resumed
    set_aside = last.get("checkpoint_set_aside", {})
    assert [m["path"] for m in set_aside.get("moved", [])] == moved
    if moved:
        assert not (out.directory / set_aside["torn_set"] / "step-8" / ".metadata").exists()
    assert (out.directory.parent / "final.pt").read_bytes() == fault_free
    print(f"DCP {fault.name}: reached {reached}, resumed {resumed}, lost {reached - resumed}")
