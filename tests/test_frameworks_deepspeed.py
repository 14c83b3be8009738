"""A real DeepSpeed training (ZeRO stage 1, 2 ranks on CPU over gloo under torchrun)
under `resched wrap`, nothing of resched inside it (examples/frameworks/deepspeed_train.py,
the example docs/your-training.md shows). 12 steps, save_checkpoint every 4,
load_checkpoint reads `latest`.

Rank 0 writes `latest` without waiting for the other ranks, so a rank that dies inside
its save leaves `latest` naming a torn `global_stepN/` (DeepSpeed never falls back by
itself). Here rank 1 stops as it makes the folder of step 8 for its optimizer file (its
second os.makedirs there), waits 2 s while rank 0 writes its files and `latest`
(FAULT_DELAY), then dies: its file of step 8 never exists and `latest` names
global_step8. The relaunch must move both aside, write `latest` anew naming global_step4
and resume from step 4. DeepSpeed builds its CPU shared-memory op with g++ on first use
(~60 s once, cached in ~/.cache/torch_extensions), ~12 s a run after. The step DeepSpeed
resumed from is its engine's global_steps right after load_checkpoint, as the training
prints it.
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

pytestmark = [needs("deepspeed"), pytest.mark.e2e, pytest.mark.slow]

SCRIPT = REPO / "examples" / "frameworks" / "deepspeed_train.py"
LOADED = re.compile(r"deepspeed-train: loaded \S+ at global step (\d+)")
# a "term" fault stops `resched wrap`, two levels above the rank (rank -> torchrun -> wrap)
ENV = {"DS_ACCELERATOR": "cpu", "FAULT_TERM_UP": "2"}


def _argv(ck: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
            str(SCRIPT), "--output-dir", str(ck), "--max-steps", "12", "--save-steps", "4",
            "--final-dir", str(ck.parent)]


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("ds-clean")
    done = subprocess.run(_argv(root / "ck"), cwd=REPO, env=child_env(**ENV),
                          capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return (root / "final.pt").read_bytes()


# torch.save(path) opens its file in C++ (no audit event); every rank makes the tag folder
# twice (os.makedirs, exist_ok): for rank 0's model states, then for its own optimizer
# file. Rank 1 dies at its second: its file of step 8 never exists.
RANK1_STEP8 = r"os.mkdir:/global_step8 "
TORN = {"FAULT_DELAY": "2"}  # rank 0 writes its files and `latest` meanwhile
# (fault, the rank it hits, extra env, step reached, step DeepSpeed resumes from, what the
# relaunch moves aside)
CASES = [
    pytest.param(Fault("torn-in-place", f"kill:{RANK1_STEP8}", False, count=2), "1", TORN, 8,
                 4, ["global_step8", "latest"], id="torn-in-place"),
    pytest.param(Fault("torn-new-pod", f"kill:{RANK1_STEP8}", True, count=2), "1", TORN, 8, 4,
                 [], id="torn-new-pod", marks=MATRIX),
    pytest.param(Fault("stop-during-save", f"term:{RANK1_STEP8}", True, count=2), "1", {}, 8,
                 4, [], id="stop-during-save", marks=MATRIX),
    pytest.param(Fault("kill", r"kill:line:\] step=10, skipped=", False), "0", {}, 10, 8, [],
                 id="kill", marks=MATRIX),
    pytest.param(Fault("term", r"term:line:\] step=10, skipped=", True), "0", {}, 10, 8, [],
                 id="term-new-pod", marks=MATRIX),
    # rank 0 dies as it opens `latest` for step 8 (after its own files, before rank 1's
    # may be whole): `latest` still names global_step4, which is what DeepSpeed loads; a
    # global_step8 that is not whole goes aside, a whole one stays (newer than `latest`)
    pytest.param(Fault("latest-not-written", r"kill:open:/latest ", False, count=2), "0", {},
                 8, 4, None, id="latest-not-written", marks=MATRIX),
]


@pytest.mark.parametrize(("fault", "rank", "env", "reached", "resumed", "moved"), CASES)
def test_fault_resumes_from_the_last_whole_tag(
        tmp_path: Path, fault_free: bytes, fault: Fault, rank: str, env: dict[str, str],
        reached: int, resumed: int, moved: list[str] | None) -> None:
    out = run_with_fault(tmp_path, SCRIPT, _argv, fault, FAULT_RANK=rank, **ENV, **env)
    assert out.codes == ((RESCHEDULE, 0) if fault.new_pod else (0,)), out.output[-4000:]
    # DeepSpeed's global_steps after load_checkpoint, as the training printed it
    assert [int(s) for s in LOADED.findall(out.output)] == [0, resumed]
    last = out.records[-1]
    assert last["decision"] == "complete" and last["checkpoint_step_before"] == resumed
    assert [r["decision"] for r in out.records[:-1]] == (
        ["reschedule"] if fault.new_pod else ["retry"])
    set_aside = last.get("checkpoint_set_aside", {})
    paths = [m["path"] for m in set_aside.get("moved", [])]
    assert sorted(paths) == sorted(moved) if moved is not None else paths in ([], ["global_step8"])
    if "latest" in paths:  # it named the torn tag: kept, and written anew
        torn = out.directory / set_aside["torn_set"]
        assert (torn / "latest").read_text() == "global_step8"
        assert (torn / "global_step8" / "mp_rank_00_model_states.pt").is_file()
        assert not list((torn / "global_step8").glob("zero_pp_rank_1_*"))
        assert [(w["path"], w["value"]) for w in set_aside["written"]] == [
            ("latest", "global_step4")]
    assert (out.directory / "latest").read_text() == "global_step12"
    assert (out.directory.parent / "final.pt").read_bytes() == fault_free
    print(f"DeepSpeed {fault.name}: reached {reached}, resumed {resumed} (DeepSpeed's "
          f"global_steps), lost {reached - resumed}, weights equal")
