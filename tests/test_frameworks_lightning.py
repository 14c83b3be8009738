"""A real Lightning training (ModelCheckpoint(every_n_train_steps=4, save_last=True or
"link"), fit(ckpt_path="last"), 12 steps) under `resched wrap`, nothing of resched inside
it (tests/framework_trainings/lightning_train.py); faults from the test hook
(tests/framework_fixtures.py).

Issue 19, part 2: a step counts complete only once what fit(ckpt_path="last") loads
exists and holds it. ModelCheckpoint writes `epoch=0-step=N.ckpt` first and `last.ckpt`
after it: a fault between the two must count (and resume) the step last.ckpt holds.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.framework_fixtures import MATRIX, RESCHEDULE, Fault, needs, run_with_fault
from tests.supervise_fixtures import REPO, child_env
from wrapper.checkpoint.layouts import inspect_layout

pytestmark = [needs("lightning"), pytest.mark.e2e]

SCRIPT = Path(__file__).parent / "framework_trainings" / "lightning_train.py"
STARTS = re.compile(r"lightning-train: training starts at global step (\d+)")


def _argv(mode: str):
    def argv(ck: Path) -> list[str]:
        return [sys.executable, str(SCRIPT), str(ck), "12", "4", *(["link"] if mode == "link" else [])]
    return argv


@pytest.fixture(scope="module")
def fault_free(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("lt-clean")
    done = subprocess.run(_argv("copy")(root / "ck"), cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return (root / "final.pt").read_bytes()


# Lightning saves through an fsspec transaction (a temp file renamed into place), so the
# hook waits for that rename. last.ckpt is renamed (copy) or linked (link) once per save:
# the 2nd time is step 8's, after epoch=0-step=8.ckpt is already in place.
BEFORE_LAST_8 = {"copy": Fault("torn-before-last", r"kill:os.rename: \S*/last\.ckpt ", False,
                               count=2),
                 "link": Fault("torn-before-last", r"kill:os.symlink:last\.ckpt", False, count=2)}
STEP_12 = r"os.rename: \S*/epoch=0-step=12\.ckpt "
# (fault, step reached, step Lightning resumes from, what the relaunch moves aside)
CASES = [
    pytest.param("copy", BEFORE_LAST_8["copy"], 8, 4, ["epoch=0-step=8.ckpt"], id="copy-torn-in-place"),
    # link mode removes last.ckpt before linking the new file: killed in between, there is
    # no last.ckpt at all (fit("last") would start from 0); the relaunch links step 8
    pytest.param("link", BEFORE_LAST_8["link"], 8, 8, [], id="link-torn-in-place",
                 marks=MATRIX),
    pytest.param("copy", Fault("kill", f"kill:{STEP_12}", False), 12, 8, [], id="kill",
                 marks=MATRIX),
    pytest.param("copy", Fault("torn-new-pod", BEFORE_LAST_8["copy"].spec, True, count=2), 8, 4,
                 [], id="torn-new-pod", marks=MATRIX),
    pytest.param("copy", Fault("stop-during-save", f"term:{STEP_12}", True), 12, 8, [],
                 id="stop-during-save", marks=MATRIX),
]


@pytest.mark.parametrize(("mode", "fault", "reached", "resumed", "moved"), CASES)
def test_fault_resumes_from_what_last_ckpt_holds(tmp_path: Path, fault_free: bytes, mode: str,
                                                 fault: Fault, reached: int, resumed: int,
                                                 moved: list[str]) -> None:
    out = run_with_fault(tmp_path, SCRIPT, _argv(mode), fault)
    assert out.codes == ((RESCHEDULE, 0) if fault.new_pod else (0,)), out.output[-4000:]
    assert [int(s) for s in STARTS.findall(out.output)] == [0, resumed]  # Lightning's own step
    first, last = out.records[0], out.records[-1]
    # what resched counted after the fault (link mode: nothing loadable until relinked)
    assert first["checkpoint_step_after"] == (None if mode == "link" else resumed)
    assert last["checkpoint_step_before"] == resumed and last["decision"] == "complete"
    set_aside = last.get("checkpoint_set_aside", {})
    assert [m["path"] for m in set_aside.get("moved", [])] == moved
    if mode == "link":
        assert [(w["path"], w["value"]) for w in set_aside["written"]] == [
            ("last.ckpt", "epoch=0-step=8.ckpt")]
    assert (out.directory.parent / "final.pt").read_bytes() == fault_free
    assert inspect_layout(out.directory).step == 12
    print(f"Lightning {mode} {fault.name}: reached {reached}, resumed {resumed}, "
          f"lost {reached - resumed}, weights equal")
