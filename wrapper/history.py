"""Attempt history that travels with the checkpoint.

One JSON file, ``<state_dir>/history.json`` (default state dir: ``<checkpoint-dir>/
.resched``), holds every attempt of every allocation, the failure count per node, the
last checkpoint step that counted as progress and the calibrated hang timeout. A
rescheduled task on a new machine gets the checkpoint back, and with it the history,
so budgets and node memory continue where they stopped.

Several ranks or nodes may record at once: every read-modify-write holds an exclusive
``fcntl`` lock on ``history.lock`` and replaces the file atomically (tmp + fsync +
rename), so a reader never sees a torn file. A corrupted file is never fatal and never
silently dropped: it is kept as ``history.json.corrupt-<time>``, a warning says so on
stderr, and the history starts again empty.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wrapper.decision import Decision
from wrapper.errors import ReschedError

HISTORY_FILE = "history.json"
LOCK_FILE = "history.lock"
SCHEMA_VERSION = 1
_NOT_FAILURES = ("complete",)
_FREE_CATEGORIES = ("preemption", "graceful-stop", "complete")


@dataclass(frozen=True)
class History:
    attempts: tuple[Mapping[str, Any], ...] = ()
    node_failures: Mapping[str, int] = field(default_factory=dict)
    last_progress_step: int | None = None
    calibrated_hang_timeout: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": SCHEMA_VERSION,
            "attempts": [dict(a) for a in self.attempts],
            "node_failures": dict(self.node_failures),
            "last_progress_step": self.last_progress_step,
            "calibrated_hang_timeout": self.calibrated_hang_timeout,
        }

    @property
    def past(self) -> tuple[PastAttempt, ...]:
        """The attempts as typed records, oldest first."""
        return tuple(PastAttempt.from_record(a) for a in self.attempts)


def is_failure(outcome: Mapping[str, Any]) -> bool:
    """Whether an attempt record spent failure budget (preemption / completion do not)."""
    if isinstance(outcome.get("counts_as_failure"), bool):
        return bool(outcome["counts_as_failure"])
    if outcome.get("decision") in _NOT_FAILURES:
        return False
    return outcome.get("category") not in _FREE_CATEGORIES


def attempt_step(outcome: Mapping[str, Any]) -> int | None:
    """The checkpoint step an attempt ended at (``step``, else ``checkpoint_step_after``)."""
    for key in ("step", "checkpoint_step_after", "checkpoint_step_before"):
        value = outcome.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


@dataclass(frozen=True)
class PastAttempt:
    """The part of a recorded attempt the policy reads, typed once at the JSON boundary.

    History files are JSON written by this and earlier versions (or by hand, in
    tests and ``resched classify --history``), so every field is optional: a missing
    or malformed value reads as unknown instead of failing.
    """

    rule: str | None
    node: str | None
    allocation: str | None
    decision: Decision | None
    step: int | None
    failure: bool
    exit_codes: frozenset[int] = frozenset()  # the attempt's and its ranks' exit codes
    exclude_node: bool = False  # the policy moved the job off this attempt's node

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PastAttempt:
        def text(key: str) -> str | None:
            value = record.get(key)
            return None if value is None else str(value)

        try:
            decision: Decision | None = Decision.parse(record.get("decision"))
        except ValueError:
            decision = None
        codes = [record.get("exit_code")]
        ranks = record.get("rank_exit_codes")
        if isinstance(ranks, Mapping):
            codes.extend(ranks.values())
        return cls(rule=text("rule"), node=text("node"), allocation=text("allocation"),
                   decision=decision, step=attempt_step(record), failure=is_failure(record),
                   exit_codes=frozenset(c for c in codes if type(c) is int),
                   exclude_node=record.get("exclude_node") is True)


class HistoryCorrupted(ValueError):
    pass


class HistoryError(ReschedError):
    """The state directory cannot hold the history (not writable, not a directory)."""


def parse_history(data: Any) -> History:
    """A History from the JSON of a history file; HistoryCorrupted names what is wrong."""
    return _parse(data)


def _parse(data: Any) -> History:
    if not isinstance(data, Mapping) or not isinstance(data.get("attempts", []), list):
        raise HistoryCorrupted("not a resched history object")
    attempts = tuple(a for a in data.get("attempts", []) if isinstance(a, Mapping))
    if len(attempts) != len(data.get("attempts", [])):
        raise HistoryCorrupted("an attempt is not a JSON object")
    nodes = data.get("node_failures") or {}
    if not isinstance(nodes, Mapping) or not all(isinstance(v, int) for v in nodes.values()):
        raise HistoryCorrupted("node_failures is not a mapping of counts")
    step = data.get("last_progress_step")
    hang = data.get("calibrated_hang_timeout")
    if step is not None and not isinstance(step, int):
        raise HistoryCorrupted("last_progress_step is not a whole number")
    if hang is not None and not isinstance(hang, (int, float)):
        raise HistoryCorrupted("calibrated_hang_timeout is not a number")
    return History(
        attempts=attempts,
        node_failures={str(k): int(v) for k, v in nodes.items()},
        last_progress_step=step,
        calibrated_hang_timeout=None if hang is None else float(hang),
    )


def with_outcome(history: History, outcome: Mapping[str, Any]) -> History:
    """The history after one more attempt: what ``HistoryStore.record`` writes, in memory
    (the failure simulator replays thousands of attempts through it)."""
    return _with_outcome(history, outcome)


def _with_outcome(history: History, outcome: Mapping[str, Any]) -> History:
    nodes = dict(history.node_failures)
    node = outcome.get("node")
    if is_failure(outcome) and node:
        nodes[str(node)] = nodes.get(str(node), 0) + 1
    progress = history.last_progress_step
    for key in ("checkpoint_step_before", "checkpoint_step_after"):
        value = outcome.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            progress = value if progress is None else max(progress, value)
    hang = outcome.get("calibrated_hang_timeout")
    return History(
        attempts=history.attempts + (dict(outcome),),
        node_failures=nodes,
        last_progress_step=progress,
        calibrated_hang_timeout=float(hang) if isinstance(hang, (int, float)) else history.calibrated_hang_timeout,
    )


class HistoryStore:
    def __init__(self, state_dir: Path, *, warn: Callable[[str], None] | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / HISTORY_FILE
        self._lock_path = self.state_dir / LOCK_FILE
        self._warn = warn or (lambda text: print(text, file=sys.stderr, flush=True))

    def load(self) -> History:
        """The current history; a missing file is an empty history."""
        if not self.path.exists():
            return History()
        try:
            with self._locked():
                return self._read()
        except HistoryError as error:
            # a read-only copy (e.g. a checkpoint mounted read-only) is still worth reading
            self._warn(f"resched: warning: {error}; reading the history without the lock")
            return self._read(repair=False)

    def record(self, outcome: Mapping[str, Any]) -> History:
        """Append one attempt (an outcome record dict) and return the new history."""
        return self._update(lambda history: _with_outcome(history, outcome))

    def set_calibrated_hang_timeout(self, seconds: float) -> History:
        """Remember the hang timeout calibrated in this attempt for the next ones."""
        return self._update(lambda h: History(h.attempts, h.node_failures, h.last_progress_step, float(seconds)))

    def _update(self, change: Callable[[History], History]) -> History:
        with self._locked():
            history = change(self._read())
            try:
                self._write(history)
            except OSError as error:
                raise self._error("cannot write", error) from error
            return history

    def _error(self, what: str, error: OSError) -> HistoryError:
        return HistoryError(
            f"{what} the attempt history: {error.strerror or error}",
            where=str(self.path),
            fix="make the state directory writable, or choose another with --state-dir",
        )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            lock = open(self._lock_path, "a+")  # noqa: SIM115 - closed below, after the yield
        except OSError as error:
            raise self._error("cannot lock", error) from error
        with lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _read(self, *, repair: bool = True) -> History:
        """Read under the lock; a corrupted file is set aside (kept) and replaced."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return History()
        try:
            return _parse(json.loads(text))
        except (ValueError, HistoryCorrupted) as error:
            if not repair:
                self._warn(f"resched: warning: history file {self.path} is corrupted ({error}); "
                           "using an empty history (the file is left as it is)")
                return History()
            kept = self.path.with_name(f"{HISTORY_FILE}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
            shutil.copy2(self.path, kept)
            self._warn(
                f"resched: warning: history file {self.path} is corrupted ({error}); "
                f"kept a copy at {kept}; starting with an empty history"
            )
            self._write(History())
            return History()

    def _write(self, history: History) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".history.", suffix=".tmp", dir=self.state_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(history.to_dict(), handle, indent=1, sort_keys=True, default=str)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with contextlib.suppress(OSError):  # make the rename durable
            dir_fd = os.open(self.state_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
