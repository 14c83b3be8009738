"""Damaged wrapper state: moved aside (kept), one warning, the training always starts.

Issue 13: a garbage, non-UTF-8, deeply nested or directory ``history.json`` gave exit 70
and a traceback and the training never started; a FIFO hung the wrapper; a NaN /
Infinity / 0 / negative calibrated hang timeout switched detection off or killed a
healthy training.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.local_fixtures import clean_env
from wrapper.hang import HangDetector, HangSettings, carried_timeout
from wrapper.history import HISTORY_FILE, History, HistoryStore

# Each maker damages <state>/history.json and returns a check that the damage was kept.
Maker = Callable[[Path], Callable[[Path], bool]]


def _write(data: bytes) -> Maker:
    def make(path: Path) -> Callable[[Path], bool]:
        path.write_bytes(data)
        return lambda kept: kept.is_file() and not kept.is_symlink() and kept.read_bytes() == data
    return make


def _directory(path: Path) -> Callable[[Path], bool]:
    path.mkdir()
    (path / "someone-elses-file").write_text("keep me")
    return lambda kept: (kept / "someone-elses-file").read_text() == "keep me"


def _fifo(path: Path) -> Callable[[Path], bool]:
    os.mkfifo(path)
    return lambda kept: kept.is_fifo()


def _symlink(path: Path) -> Callable[[Path], bool]:
    # A link to a valid-looking history outside the state dir: never followed, never written.
    target = path.parent.parent / "not-ours.json"
    target.write_text(json.dumps({"attempts": [], "node_failures": {}}))
    path.symlink_to(target)
    before = target.read_bytes()
    return lambda kept: kept.is_symlink() and kept.resolve() == target and target.read_bytes() == before


DAMAGE: dict[str, Maker] = {
    "garbage": _write(b"\x00\x01garbage{"),
    "torn": _write(b'{"attempts": [{"attempt": 1}, '),
    "not-utf8": _write(b'{"attempts": ["\xff\xfe"]}'),
    "deeply-nested": _write(b"[" * 200_000 + b"]" * 200_000),
    "wrong-shape": _write(json.dumps({"attempts": {"a": 1}}).encode()),
    "negative-count": _write(json.dumps({"attempts": [], "node_failures": {"n": -3}}).encode()),
    "bool-step": _write(json.dumps({"attempts": [], "last_progress_step": True}).encode()),
    "huge-int": _write(b'{"attempts": [], "last_progress_step": ' + b"9" * 5000 + b"}"),
    "directory": _directory,
    "fifo": _fifo,
    "symlink": _symlink,
}


@pytest.mark.timeout(60)  # a FIFO used to block the read forever
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_history_is_moved_aside_and_history_restarts(tmp_path: Path, damage: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    was_kept = DAMAGE[damage](state / HISTORY_FILE)
    warnings: list[str] = []
    store = HistoryStore(state, warn=warnings.append)
    assert store.load() == History()
    kept = list(state.glob(f"{HISTORY_FILE}.corrupt-*"))
    assert len(kept) == 1 and was_kept(kept[0]), damage
    assert len(warnings) == 1 and "\n" not in warnings[0] and str(kept[0]) in warnings[0]
    assert store.record({"attempt": 1, "decision": "retry", "node": "n1"}).node_failures == {"n1": 1}
    assert len(warnings) == 1
    assert json.loads((state / HISTORY_FILE).read_text())["attempts"][0]["attempt"] == 1


def test_damage_twice_in_a_second_keeps_both(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    store = HistoryStore(state, warn=lambda _: None)
    for text in ("first{", "second{"):
        (state / HISTORY_FILE).write_text(text)
        store.load()
    kept = sorted(p.read_text() for p in state.glob(f"{HISTORY_FILE}.corrupt-*"))
    assert kept == ["first{", "second{"]


def test_a_lock_file_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    target = tmp_path / "elsewhere"
    (state / "history.lock").symlink_to(target)
    warnings: list[str] = []
    assert HistoryStore(state, warn=warnings.append).load() == History()
    assert not target.exists()


# -- numbers read back from state ------------------------------------------------------


BAD_TIMEOUTS = ["NaN", "Infinity", "-Infinity", "0", "-5", "1e300", "true", '"600"']


@pytest.mark.parametrize("raw", BAD_TIMEOUTS)
def test_bad_calibrated_timeout_is_dropped_and_the_rest_kept(tmp_path: Path, raw: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / HISTORY_FILE).write_text(
        '{"attempts": [{"attempt": 1}], "node_failures": {"a": 1}, "last_progress_step": 5, '
        f'"calibrated_hang_timeout": {raw}}}')
    history = HistoryStore(state, warn=lambda _: None).load()
    assert history.calibrated_hang_timeout is None
    assert (len(history.attempts), history.node_failures, history.last_progress_step) == (1, {"a": 1}, 5)


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0, -5.0, 1e300])
def test_store_never_writes_a_bad_timeout(tmp_path: Path, value: float) -> None:
    store = HistoryStore(tmp_path, warn=lambda _: None)
    store.set_calibrated_hang_timeout(120.0)
    assert store.set_calibrated_hang_timeout(value).calibrated_hang_timeout == 120.0
    assert store.record({"attempt": 1, "calibrated_hang_timeout": value}).calibrated_hang_timeout == 120.0


AUTO = HangSettings(auto=True, subsequent_timeout_s=10.0, min_calibrated_s=2.0)


@pytest.mark.parametrize("carried", [math.nan, math.inf, 1e300])
def test_a_carried_nan_or_inf_does_not_switch_detection_off(carried: float) -> None:
    detector = HangDetector(HangSettings(**{**AUTO.__dict__, "calibrated_s": carried}), started_at=0.0)
    detector.observe_heartbeat(1.0)
    assert detector.timeout_s() == 10.0  # the generous default applies, detection stays on
    assert detector.expired(12.0)
    assert detector.calibrated_timeout_s() is None or math.isfinite(detector.calibrated_timeout_s() or 0)


@pytest.mark.parametrize("carried", [0.0, -5.0, 1e-9])
def test_a_carried_zero_or_negative_does_not_kill_a_healthy_training(carried: float) -> None:
    detector = HangDetector(HangSettings(**{**AUTO.__dict__, "calibrated_s": carried}), started_at=0.0)
    for step in range(1, 50):  # a healthy training: a heartbeat every second
        detector.observe_heartbeat(float(step))
        assert not detector.expired(step + 0.999)
    assert (detector.timeout_s() or 0) >= AUTO.min_calibrated_s
    assert (detector.calibrated_timeout_s() or 0) >= AUTO.min_calibrated_s


def test_carried_timeout_accepts_only_usable_numbers() -> None:
    assert carried_timeout(90) == 90.0
    for bad in (math.nan, math.inf, 0, -1, True, "90", None, 8 * 86400):
        assert carried_timeout(bad) is None


# -- the real wrapper: the training always starts ----------------------------------------


HEALTHY = textwrap.dedent("""\
    import os, pathlib, sys, time
    pathlib.Path(sys.argv[1]).write_text("started")
    beat = os.environ["RESCHED_HEARTBEAT_FILE"]
    for _ in range(12):  # a healthy loop: a step every 0.1 s
        os.utime(beat, None)
        time.sleep(0.1)
""")


def _wrap(tmp_path: Path, state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(HEALTHY)
    env = clean_env()
    return subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(state),
         "--max-retries", "0", "--max-reschedules", "0", *extra, "--",
         sys.executable, str(script), str(tmp_path / "started")],
        capture_output=True, text=True, timeout=120, env=env,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("damage", ["directory", "fifo", "deeply-nested", "not-utf8"])
def test_wrap_starts_the_training_on_a_damaged_history(tmp_path: Path, damage: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    DAMAGE[damage](state / HISTORY_FILE)
    done = _wrap(tmp_path, state)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "started").read_text() == "started"
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "corrupted" in warnings[0], done.stderr
    assert len(list(state.glob(f"{HISTORY_FILE}.corrupt-*"))) == 1


@pytest.mark.e2e
@pytest.mark.parametrize("raw", ["0", "-5"])
def test_wrap_does_not_kill_a_healthy_training_for_a_bad_carried_timeout(
    tmp_path: Path, raw: str
) -> None:
    """Before: the carried 0 became the timeout, the healthy loop was called hung."""
    state = tmp_path / "state"
    state.mkdir()
    (state / HISTORY_FILE).write_text(f'{{"attempts": [], "calibrated_hang_timeout": {raw}}}')
    done = _wrap(tmp_path, state, "--hang-timeout", "auto,min=5s")
    assert done.returncode == 0, done.stderr
    assert "attempt 1 ended: exit 0" in done.stderr and "attempt 2" not in done.stderr, done.stderr
