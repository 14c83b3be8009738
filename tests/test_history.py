"""History: atomic, locked, concurrent writers, corruption recovery, carried across runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wrapper.history import HISTORY_FILE, History, HistoryError, HistoryStore

_WRITER = """
import sys
from pathlib import Path
from wrapper.history import HistoryStore
store = HistoryStore(Path(sys.argv[1]))
writer = sys.argv[2]
for i in range(int(sys.argv[3])):
    store.record({"attempt": i, "writer": writer, "node": writer, "decision": "retry", "rule": "nccl-error",
                  "allocation": "a1", "checkpoint_step_after": i})
"""


def outcome(i: int, **extra: object) -> dict[str, object]:
    return {"attempt": i, "node": "n1", "allocation": "a1", "rule": "nccl-error", "decision": "retry",
            "checkpoint_step_before": 10 * i, "checkpoint_step_after": 10 * i + 5, **extra}


def test_missing_history_is_empty(tmp_path: Path) -> None:
    assert HistoryStore(tmp_path / "state").load() == History()


def test_record_and_carry_across_stores(tmp_path: Path) -> None:
    state = tmp_path / "ckpt" / ".resched"
    first = HistoryStore(state)
    first.record(outcome(1))
    first.record(outcome(2, decision="reschedule", calibrated_hang_timeout=42.5))
    # a new wrapper run (a rescheduled task) on the same state dir continues the history
    history = HistoryStore(state).load()
    assert [a["attempt"] for a in history.attempts] == [1, 2]
    assert history.node_failures == {"n1": 2}
    assert history.last_progress_step == 25
    assert history.calibrated_hang_timeout == 42.5
    history = HistoryStore(state).record({"attempt": 3, "node": "n2", "decision": "reschedule", "category": "preemption"})
    assert history.node_failures == {"n1": 2}  # a preemption is not a node failure
    assert history.calibrated_hang_timeout == 42.5
    assert HistoryStore(state).set_calibrated_hang_timeout(7.0).calibrated_hang_timeout == 7.0
    assert json.loads((state / HISTORY_FILE).read_text())["version"] == 1


def test_concurrent_writers_in_real_processes_lose_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    writers, per_writer = 4, 15  # enough to interleave; each record rewrites the file under the lock
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(state), f"w{w}", str(per_writer)])
             for w in range(writers)]
    assert [p.wait(timeout=120) for p in procs] == [0] * writers
    history = HistoryStore(state).load()
    assert len(history.attempts) == writers * per_writer
    assert history.node_failures == {f"w{w}": per_writer for w in range(writers)}
    for w in range(writers):  # each writer's records stay in its own order
        mine = [a["attempt"] for a in history.attempts if a["writer"] == f"w{w}"]
        assert mine == list(range(per_writer))
    assert not list(state.glob(".history.*.tmp"))


def test_corrupted_file_is_kept_reported_and_replaced(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / HISTORY_FILE).write_text('{"attempts": [{"attempt": 1}, ')  # torn write
    warnings: list[str] = []
    store = HistoryStore(state, warn=warnings.append)
    assert store.load() == History()
    copies = list(state.glob(f"{HISTORY_FILE}.corrupt-*"))
    assert len(copies) == 1 and copies[0].read_text() == '{"attempts": [{"attempt": 1}, '
    assert len(warnings) == 1 and "is corrupted" in warnings[0] and str(copies[0]) in warnings[0]
    assert store.record(outcome(1)).attempts[0]["attempt"] == 1
    assert len(warnings) == 1  # recovered once, not on every load


def test_wrong_shape_counts_as_corrupted(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / HISTORY_FILE).write_text(json.dumps({"attempts": "nope"}))
    warnings: list[str] = []
    assert HistoryStore(state, warn=warnings.append).record(outcome(1)).attempts == (outcome(1),)
    assert warnings and list(state.glob(f"{HISTORY_FILE}.corrupt-*"))


def test_corruption_warning_goes_to_stderr_by_default(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / HISTORY_FILE).write_text("\x00\x01garbage")
    result = subprocess.run(
        [sys.executable, "-c", f"from wrapper.history import HistoryStore; print(len(HistoryStore(__import__('pathlib').Path({str(state)!r})).load().attempts))"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0 and result.stdout.strip() == "0"
    assert result.stderr.startswith("resched: warning: history file")


def test_unwritable_state_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the state directory should be")
    with pytest.raises(HistoryError) as info:
        HistoryStore(blocked / "state").record(outcome(1))
    assert "\n" not in str(info.value) and "--state-dir" in str(info.value)


def test_history_is_still_read_when_the_lock_cannot_be_taken(tmp_path: Path) -> None:
    state = tmp_path / "state"
    HistoryStore(state).record(outcome(1))
    (state / "history.lock").unlink()
    (state / "history.lock").mkdir()  # the lock file cannot be opened
    warnings: list[str] = []
    store = HistoryStore(state, warn=warnings.append)
    assert [a["attempt"] for a in store.load().attempts] == [1]
    assert len(warnings) == 1 and "without the lock" in warnings[0]
    with pytest.raises(HistoryError):
        store.record(outcome(2))
