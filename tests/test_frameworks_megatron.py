"""A real Megatron-Core training (examples/frameworks/megatron_train.py: an MLP of
megatron.core tensor-parallel layers, TP=2 over gloo on CPU under torchrun, saved with
megatron.core.dist_checkpointing in Megatron-LM's iter_N/ + tracker layout) under
`resched wrap`, nothing of resched inside it; faults from the test hook
(tests/framework_fixtures.py). 12 iterations, a save every 4.

One save, as the hook sees it (rank 0's process): iter_N/ made, common.pt, each rank's
__<rank>_<i>.distcp from forked writer processes, .metadata.tmp renamed to .metadata,
metadata.json, barrier, then latest_checkpointed_iteration.txt. For every fault: the
iteration Megatron resumed from (its own "successfully loaded checkpoint ... at
iteration N" line) is the newest whole save, the one resched recorded, a torn iter_N/
goes aside (kept) before the relaunch, and the final weights of both tensor-parallel
ranks equal a fault-free run's bit for bit. ~12 s a training run here (importing
megatron.core takes ~5 s a process).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from local_fixtures import free_port

from tests.framework_fixtures import MATRIX, RESCHEDULE, Fault, needs, run_with_fault
from tests.supervise_fixtures import REPO, child_env

pytestmark = [needs("megatron.core"), pytest.mark.e2e, pytest.mark.slow]

SCRIPT = REPO / "examples" / "frameworks" / "megatron_train.py"
LOADED = re.compile(r"successfully loaded checkpoint from \S+ \[ t 1/2, p 1/1 \] at iteration (\d+)")
# a "term" fault stops `resched wrap`, two levels above the rank (rank -> torchrun -> wrap)
ENV = {"FAULT_TERM_UP": "2"}


def _argv(ck: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
            str(SCRIPT), "--output-dir", str(ck), "--max-steps", "12", "--save-steps", "4",
            "--final-dir", str(ck.parent)]


def _finals(directory: Path) -> list[bytes]:
    return [(directory / f"final-tp{rank}.pt").read_bytes() for rank in (0, 1)]


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    root = tmp_path_factory.mktemp("megatron-clean")
    done = subprocess.run(_argv(root / "ck"), cwd=REPO, env=child_env(), capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not LOADED.search(done.stdout)  # no tracker: it started from scratch
    return _finals(root)


META_TMP_8 = r"iter_0000008/\.metadata\.tmp "  # every .distcp written, no .metadata yet
CONFIG_8 = r"iter_0000008/metadata\.json "  # .metadata renamed in, metadata.json not yet
TRACKER = r"latest_checkpointed_iteration\.txt "  # the 2nd: iter_0000008/ whole, tracker 4
# (fault, step reached when it hit, iteration Megatron resumes from, what goes aside)
CASES = [
    pytest.param(Fault("torn-in-place", f"kill:open:{META_TMP_8}", new_pod=False), 8, 4,
                 ["iter_0000008"], id="torn-in-place"),
    pytest.param(Fault("kill", r"kill:line:iteration +10/", new_pod=False), 10, 8, [],
                 id="kill", marks=MATRIX),
    pytest.param(Fault("config-torn", f"kill:open:{CONFIG_8}", new_pod=False), 8, 4,
                 ["iter_0000008"], id="metadata-json-not-written", marks=MATRIX),
    pytest.param(Fault("tracker-not-written", f"kill:open:{TRACKER}", new_pod=False, count=2),
                 8, 4, ["iter_0000008"], id="tracker-not-written", marks=MATRIX),
    pytest.param(Fault("term", r"term:line:iteration +10/", new_pod=True), 10, 8, [],
                 id="term-new-pod", marks=MATRIX),
    pytest.param(Fault("torn-new-pod", f"kill:open:{META_TMP_8}", new_pod=True), 8, 4, [],
                 id="torn-new-pod", marks=MATRIX),
    pytest.param(Fault("stop-during-save", f"term:open:{META_TMP_8}", new_pod=True), 8, 4, [],
                 id="stop-during-save", marks=MATRIX),
]


@pytest.mark.parametrize(("fault", "reached", "resumed", "moved"), CASES)
def test_fault_resumes_from_the_newest_whole_iteration(
        tmp_path: Path, fault_free: list[bytes], fault: Fault, reached: int, resumed: int,
        moved: list[str]) -> None:
    out = run_with_fault(tmp_path, SCRIPT, _argv, fault, **ENV)
    assert out.codes == ((RESCHEDULE, 0) if fault.new_pod else (0,)), out.output[-4000:]
    # Megatron's own log: the iteration it loaded
    assert [int(s) for s in LOADED.findall(out.output)] == [resumed]
    last = out.records[-1]
    assert last["decision"] == "complete"
    assert last["checkpoint_step_before"] == resumed  # what resched says = what Megatron did
    assert [r["decision"] for r in out.records[:-1]] == (
        ["reschedule"] if fault.new_pod else ["retry"])
    set_aside = last.get("checkpoint_set_aside", {})
    assert [m["path"] for m in set_aside.get("moved", [])] == moved
    if moved:  # kept, nothing deleted; Megatron saved iteration 8 again, whole
        torn = out.directory / set_aside["torn_set"] / "iter_0000008"
        assert (torn / "common.pt").is_file()
        assert (out.directory / "iter_0000008" / "metadata.json").is_file()
    assert (out.directory / "latest_checkpointed_iteration.txt").read_text() == "12"
    assert not (out.directory / ".resched-torn").exists() or not fault.new_pod
    assert _finals(out.directory.parent) == fault_free
    print(f"Megatron {fault.name}: reached {reached}, resumed {resumed} (Megatron log), lost "
          f"{reached - resumed}, weights equal")
