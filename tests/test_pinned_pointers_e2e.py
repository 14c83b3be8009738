"""`resched wrap` beside a training that saves faster than a publish takes, its pointer
file rewritten in place at every save (Megatron-LM's tracker, DeepSpeed's ``latest``).

The training is a real process saving the frameworks' way (tests/pointer_fixtures.py)
every 0.1 s, while the wrapper publishes every 0.2 s. To make "a save lands during the publish" certain rather than likely, the
wrapper stops itself inside its first periodic publish, once every file is uploaded
(``RESCHED_CRASHPOINT=publish.after_blobs:SIGSTOP``); the test lets it go on only after
the training saved again. Before: that publish, and every one a save overlapped, was
refused ("changed while it was published"). Now it commits the checkpoint it scanned,
pointer bytes as judged. A rotation that deletes the published folder meanwhile still
refuses it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from checkpoint_fixtures import checkpoint_cache_dir  # noqa: F401

from tests.pointer_fixtures import DEEPSPEED_LATEST, MEGATRON_TRACKER, SAVERS
from tests.supervise_fixtures import REPO, child_env
from wrapper.checkpoint import CheckpointStore
from wrapper.checkpoint.layouts import inspect_layout

pytestmark = pytest.mark.e2e
RESCHED = [sys.executable, "-m", "workflows.cli"]
POINTER = {"megatron": MEGATRON_TRACKER, "deepspeed": DEEPSPEED_LATEST}
# The outcome of a round that uploaded every file, i.e. the first one of them is the
# round the wrapper was held in (a round refused earlier, while scanning or uploading,
# says "vanished" or "incomplete", never this).
OUTCOME = re.compile(r"checkpoint published step (\d+)|changed while it was published")


def _start(tmp_path: Path, layout: str, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    ck, err = tmp_path / "ck", tmp_path / "wrap.err"
    training = [sys.executable, "-m", "tests.pointer_fixtures", "--layout", layout, "--dir",
                str(ck), "--stop-file", str(tmp_path / "stop"), *extra]
    with open(tmp_path / "wrap.out", "wb") as out, open(err, "wb") as errors:
        wrapper = subprocess.Popen(
            [*RESCHED, "wrap", "--checkpoint-dir", str(ck), "--checkpoint-url",
             f"file://{tmp_path}/store", "--sync-every", "0.2", "--max-retries", "0", "--",
             *training],
            cwd=REPO, env=child_env(RESCHED_CRASHPOINT="publish.after_blobs:SIGSTOP"),
            stdout=out, stderr=errors)
    return wrapper, err


def _wait(condition: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _pointer(tmp_path: Path, layout: str) -> bytes:
    """The pointer's bytes once it holds a value (the frameworks truncate it, then write)."""
    raw = b""
    while not raw.strip():
        try:
            raw = (tmp_path / "ck" / POINTER[layout]).read_bytes()
        except FileNotFoundError:
            pass
    return raw


def _step_of(raw: bytes) -> int:
    return int(re.sub(rb"\D", b"", raw) or b"-1")


def _outcomes(err: Path) -> list[re.Match[str]]:
    return list(OUTCOME.finditer(err.read_text(errors="replace")))


def _hold_first_upload(wrapper: subprocess.Popen[bytes], err: Path,
                       meanwhile: Callable[[], tuple[int, int]], timeout: float = 60.0
                       ) -> tuple[int, int]:
    """Wait until the wrapper holds itself inside its first upload, run ``meanwhile``
    (the training goes on), let the wrapper go on and wait for that upload's outcome;
    return what ``meanwhile`` returned."""
    try:
        _wait(lambda: _state(wrapper.pid) == "T", "the wrapper inside its first upload",
              timeout)
        seen = meanwhile()
        os.kill(wrapper.pid, signal.SIGCONT)
        _wait(lambda: _outcomes(err), "the outcome of the held upload", timeout)
        return seen
    finally:
        os.kill(wrapper.pid, signal.SIGCONT)


def _next_save(folder: Path, layout: str, timeout: float = 60.0) -> Callable[[], tuple[int, int]]:
    """``meanwhile``: the step the pointer named when the wrapper stopped, and the one it
    names after the training's next save (a new folder, the pointer rewritten in place)."""
    def wait() -> tuple[int, int]:
        at_stop = _step_of(_pointer(folder, layout))
        _wait(lambda: _step_of(_pointer(folder, layout)) > at_stop, "the training's next save",
              timeout)
        return at_stop, _step_of(_pointer(folder, layout))
    return wait


def _finish(tmp_path: Path, wrapper: subprocess.Popen[bytes]) -> None:
    (tmp_path / "stop").touch()
    assert wrapper.wait(timeout=120) == 0, (tmp_path / "wrap.err").read_text()[-3000:]


def _restored_consistent(tmp_path: Path, layout: str) -> int:
    """Restore the store's latest; the framework would load it: its pointer names a
    whole folder that came with it. Returns that step."""
    target = tmp_path / "restored"
    result = CheckpointStore(f"file://{tmp_path}/store").restore(target)
    assert result is not None and not result.fell_back
    verdict = inspect_layout(target)
    assert verdict.complete is True, verdict.reason
    assert _step_of((target / POINTER[layout]).read_bytes()) == verdict.step == result.step
    return result.step  # type: ignore[no-any-return]


@pytest.mark.parametrize("layout", sorted(SAVERS))
def test_a_periodic_upload_commits_though_the_training_saved_during_it(tmp_path: Path,
                                                                       layout: str) -> None:
    # Every save kept (a rotation of any folder the upload read refuses it, below). The
    # hold makes this publish outlast a save whatever the pace; 0.1 s keeps the scans,
    # which grow with the folders, short on a loaded machine.
    wrapper, err = _start(tmp_path, layout, "--every", "0.1")
    try:
        at_stop, moved_on = _hold_first_upload(wrapper, err, _next_save(tmp_path, layout))
    finally:
        _finish(tmp_path, wrapper)
    first = _outcomes(err)[0]
    assert first.group(1) is not None, err.read_text()[-3000:]  # committed, not refused
    assert int(first.group(1)) <= at_stop < moved_on  # the pointer of the scan
    # no round was refused for the pointer (one may be for the wrapper's own records in
    # .resched/, written when the attempt ends while a round runs)
    refused = re.findall(r"changed while it was published \((\S+)", err.read_text())
    assert POINTER[layout] not in refused, err.read_text()[-3000:]
    assert _restored_consistent(tmp_path, layout) == _step_of(_pointer(tmp_path, layout))


@pytest.mark.parametrize("layout", sorted(SAVERS))
def test_a_rotation_deleting_the_uploaded_folder_still_refuses(tmp_path: Path, layout: str
                                                               ) -> None:
    """The training keeps its newest 3 saves: while the wrapper is held inside its upload,
    the folder the pinned pointer names is deleted. That upload commits nothing; the
    final one (the training ended, nothing changes) commits what is there. (Slower saves
    than above: a round must first get through an upload before its folders rotate away.)"""
    wrapper, err = _start(tmp_path, layout, "--every", "0.05", "--keep", "3")

    def rotated() -> tuple[int, int]:
        at_stop = _step_of(_pointer(tmp_path, layout))
        folder = (f"iter_{at_stop:07d}" if layout == "megatron" else f"global_step{at_stop}")
        _wait(lambda: not (tmp_path / "ck" / folder).exists(), "the rotation")
        return at_stop, _step_of(_pointer(tmp_path, layout))

    try:
        _hold_first_upload(wrapper, err, rotated)
    finally:
        _finish(tmp_path, wrapper)
    first = _outcomes(err)[0]
    assert first.group(1) is None, err.read_text()[-3000:]  # refused
    assert _restored_consistent(tmp_path, layout) == _step_of(_pointer(tmp_path, layout))


# --- the real frameworks (CPU, 2 ranks over gloo; skipped where not installed) -----------

EXAMPLES = REPO / "examples" / "frameworks"
REAL = {
    # (script, env, the framework's own line saying which step it loaded)
    "deepspeed": ("deepspeed_train.py", {"DS_ACCELERATOR": "cpu"},
                  re.compile(r"deepspeed-train: loaded \S+ at global step (\d+)")),
    "megatron": ("megatron_train.py", {},
                 re.compile(r"successfully loaded checkpoint from \S+ .* at iteration (\d+)")),
}


def _real_training(ck: Path, script: str, steps: int) -> list[str]:
    from local_fixtures import free_port

    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
            str(EXAMPLES / script), "--output-dir", str(ck), "--max-steps", str(steps),
            "--save-steps", "1", "--step-time", "0.05"]


def _real_wrap(tmp_path: Path, pod: str, layout: str, steps: int, **env: str
               ) -> tuple[subprocess.Popen[bytes], Path, Path]:
    script, extra, _ = REAL[layout]
    ck, out, err = tmp_path / pod / "ck", tmp_path / f"{pod}.out", tmp_path / f"{pod}.err"
    ck.parent.mkdir()
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        wrapper = subprocess.Popen(
            [*RESCHED, "wrap", "--checkpoint-dir", str(ck), "--checkpoint-url",
             f"file://{tmp_path}/store", "--sync-every", "0.2", "--max-retries", "0", "--",
             *_real_training(ck, script, steps)],
            cwd=REPO, env=child_env(**extra, **env), stdout=stdout, stderr=stderr)
    return wrapper, out, err


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["deepspeed", "megatron"])
def test_a_real_training_saving_every_step_gets_its_periodic_upload_committed(
        tmp_path: Path, layout: str) -> None:
    """examples/frameworks (nothing of resched inside) saving at every step under `resched
    wrap`: held inside its first upload until the framework rewrote its pointer, the
    periodic upload still commits; a new pod restores the store's checkpoint and the
    framework itself loads it (its own log line), at the step resched restored."""
    pytest.importorskip("deepspeed" if layout == "deepspeed" else "megatron.core")
    steps = 40 if layout == "deepspeed" else 20  # a Megatron-Core save takes ~0.3 s here
    wrapper, _out, err = _real_wrap(tmp_path, "pod1", layout, steps,
                                    RESCHED_CRASHPOINT="publish.after_blobs:SIGSTOP")
    pointer = tmp_path / "pod1" / "ck" / POINTER[layout]
    at_stop, moved_on = _hold_first_upload(wrapper, err, _next_save(tmp_path / "pod1", layout,
                                                                   240), 240)
    assert wrapper.wait(timeout=300) == 0, err.read_text()[-3000:]
    first = _outcomes(err)[0]
    assert first.group(1) is not None, err.read_text()[-3000:]  # committed, not refused
    assert int(first.group(1)) <= at_stop < moved_on
    assert POINTER[layout] not in re.findall(r"changed while it was published \((\S+)",
                                             err.read_text())
    last = _step_of(pointer.read_bytes())
    assert last == steps
    pod2, out2, err2 = _real_wrap(tmp_path, "pod2", layout, steps)
    assert pod2.wait(timeout=300) == 0, err2.read_text()[-3000:]
    assert f"restored step {last}" in err2.read_text()
    assert [int(s) for s in REAL[layout][2].findall(out2.read_text())] == [last]
