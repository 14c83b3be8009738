"""Concurrent `resched wrap` processes on one checkpoint directory (issue 21 leftover).

The start-up restore ran before the state-dir lock (the state dir lives inside the
checkpoint dir, which restore wants empty): two wrappers started at once could both heal
and restore, and the second's healing removed the first's staging folder under it. Now
a wrapper that owns the store (``--checkpoint-url``) takes the directory's own lock
(outside the directory: wrapper/checkpoint/dirlock.py) before it heals or restores; a
second one is refused with one line and touches nothing. Real processes; a wrapper is
held still at a named start-up step with ``RESCHED_CRASHPOINT=<step>:SIGSTOP``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkpoint_fixtures import checkpoint_cache_dir, read_tree, write_tree  # noqa: F401

from tests.supervise_fixtures import child_env, wait_for_file
from wrapper.checkpoint import CheckpointStore, mark_complete

pytestmark = pytest.mark.e2e
RESCHED = [sys.executable, "-m", "workflows.cli"]
BUSY = "another resched wrap owns this checkpoint directory"
FILES = {"model.bin": os.urandom(4096), "optim/state.bin": b"optimizer" * 100}


def _published(tmp_path: Path) -> str:
    source = tmp_path / "source"
    write_tree(source, FILES)
    mark_complete(source, 7)
    url = f"file://{tmp_path / 'store'}"
    CheckpointStore(url).publish(source)
    return url


def _wrap(ck: Path, url: str, node: str, command: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*RESCHED, "wrap", "--checkpoint-dir", str(ck), "--checkpoint-url", url, "--node", node,
         "--max-retries", "0", "--", "sh", "-c", command],
        cwd=ck.parent, env=child_env(**env), text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)


def _stopped(pid: int, timeout: float = 60.0) -> None:
    """Wait until ``pid`` stopped itself (SIGSTOP at its crash point)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if fields[0] == "T":
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never reached its crash point")


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("resched: error:")]


def _siblings(ck: Path) -> list[str]:
    return sorted(p.name for p in ck.parent.iterdir() if ".resched-restore-" in p.name)


def _listing(ck: Path) -> list[str]:
    """Everything in and beside the target that a restore makes (staging, the target)."""
    inside = sorted(p.relative_to(ck).as_posix() for p in ck.rglob("*")) if ck.is_dir() else []
    return _siblings(ck) + inside


@pytest.mark.parametrize("step", ["startup.before_restore", "restore.after_stage_dir"])
def test_a_second_wrapper_is_refused_before_it_heals_or_restores(tmp_path: Path, step: str
                                                                  ) -> None:
    """The first wrapper is held at ``step`` (lock taken; after the staging folder was
    made, for the second case). The second, another node even, is refused with one line,
    restores nothing and leaves the first's staging folder alone (before: its healing
    removed it, and the first restore then failed); the first then finishes its restore."""
    url, ck = _published(tmp_path), tmp_path / "ck"
    first = _wrap(ck, url, "n1", f"cat {ck}/optim/state.bin > {tmp_path}/seen",
                  RESCHED_CRASHPOINT=f"{step}:SIGSTOP")
    try:
        _stopped(first.pid)
        staged = _listing(ck)
        assert bool(staged) == (step == "restore.after_stage_dir")  # a staging folder
        second = _wrap(ck, url, "n2", f"echo second ran > {tmp_path}/second")
        _out, err = second.communicate(timeout=60)
        assert second.returncode == 2, err
        (line,) = _error_lines(err)
        assert BUSY in line and str(ck) in line and "--checkpoint-dir" in line
        assert "Traceback" not in err and "restored step" not in err
        assert not (tmp_path / "second").exists()
        assert _listing(ck) == staged  # the first's staging (if any) is untouched
    finally:
        os.kill(first.pid, signal.SIGCONT)
        _out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert "restored step 7" in err
    assert (tmp_path / "seen").read_bytes() == FILES["optim/state.bin"]
    restored = {k: v for k, v in read_tree(ck).items() if not k.startswith(".resched/")}
    assert restored == FILES and _siblings(ck) == []


def test_wrappers_started_at_once_restore_once_and_the_others_are_refused(tmp_path: Path
                                                                          ) -> None:
    """Three wrappers started together on one empty directory: exactly one restores and
    trains (held until the others ended), the others say so in one line each; no "not
    empty; keeping it" (a wrapper that saw another's restore half-way) anywhere."""
    url, ck = _published(tmp_path), tmp_path / "ck"
    go, ran = tmp_path / "go", tmp_path / "ran"
    command = f"echo $$ >> {ran}; while [ ! -e {go} ]; do sleep 0.02; done"
    wrappers = [_wrap(ck, url, f"n{i}", command) for i in range(3)]
    try:
        trainer = _parent(int(wait_for_file(ran, timeout=60).split()[0]))
        assert trainer in {w.pid for w in wrappers}
        for other in (w for w in wrappers if w.pid != trainer):
            other.wait(timeout=60)  # refused while the trainer holds the directory
    finally:
        go.touch()
        results = [(w.wait(timeout=60), w.communicate(timeout=60)[1]) for w in wrappers]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2, 2], results
    assert len(ran.read_text().split()) == 1  # one training ran
    stderr = "\n".join(err for _, err in results)
    assert stderr.count("restored step 7") == 1 and "keeping it" not in stderr
    for code, err in results:
        if code == 2:
            (line,) = _error_lines(err)
            assert BUSY in line
    restored = {k: v for k, v in read_tree(ck).items() if not k.startswith(".resched/")}
    assert restored == FILES


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_wrapper_refused_by_the_state_lock_leaves_the_checkpoint_dir_alone(tmp_path: Path
                                                                            ) -> None:
    """No --checkpoint-url: the state-dir lock refuses the second wrapper of a node. Its
    exit used to judge the directory "before the final upload" anyway and move the
    running training's save-in-progress aside; now it touches nothing."""
    ck, go, started = tmp_path / "ck", tmp_path / "go", tmp_path / "started"
    ck.mkdir()
    whole = ck / "iter_0000004"
    write_tree(whole, {"common.pt": b"c", "__0_0.distcp": b"r0", ".metadata": b"m",
                       "metadata.json": b'{"sharded_backend": "torch_dist"}'})
    (ck / "latest_checkpointed_iteration.txt").write_text("4")
    saving = ck / "iter_0000008"  # the training's next save, under way while it runs
    training = (f"mkdir {saving} && echo c8 > {saving}/common.pt && echo rank0 > "
                f"{saving}/__0_0.distcp && echo up > {started}; "
                f"while [ ! -e {go} ]; do sleep 0.02; done")
    first = subprocess.Popen(
        [*RESCHED, "wrap", "--checkpoint-dir", str(ck), "--node", "n1", "--", "sh", "-c",
         training],
        cwd=tmp_path, env=child_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_file(started, timeout=60)
        before = {k: v for k, v in read_tree(ck).items() if not k.startswith(".resched/")}
        assert "iter_0000008/common.pt" in before
        second = subprocess.run(
            [*RESCHED, "wrap", "--checkpoint-dir", str(ck), "--node", "n1", "--", "echo", "no"],
            cwd=tmp_path, env=child_env(), text=True, capture_output=True, timeout=60,
            check=False)
        assert second.returncode == 2 and second.stdout == "", second.stderr
        (line,) = _error_lines(second.stderr)
        assert "another resched wrap on node n1" in line
        assert "moved" not in second.stderr
        now = {k: v for k, v in read_tree(ck).items() if not k.startswith(".resched/")}
        assert now == before and not (ck / ".resched-torn").exists()
    finally:
        go.touch()
        first.communicate(timeout=60)
    assert first.returncode == 0
