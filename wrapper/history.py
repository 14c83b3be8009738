"""Attempt history that travels with the checkpoint.

One JSON file, ``<state_dir>/history.json`` (default state dir: ``<checkpoint-dir>/
.resched``), holds every attempt of every allocation, the failure count per node, the
last checkpoint step that counted as progress and the calibrated hang timeout. A
rescheduled task on a new machine gets the checkpoint back, and with it the history,
so budgets and node memory continue where they stopped.

Several ranks or nodes may record at once: every read-modify-write holds an exclusive
``fcntl`` lock on ``history.lock`` and replaces the file atomically (tmp + fsync +
rename), so a reader never sees a torn file. A corrupted file is never fatal and never
silently dropped: it is renamed to ``history.json.corrupt-<time>`` (kept, never deleted,
whatever it is: garbage, not UTF-8, nested too deeply, a directory, a FIFO, a symbolic
link, which is renamed itself and never followed), a one-line warning says so on stderr,
and the history starts again empty. Numbers read back are checked: a calibrated hang
timeout that is NaN, infinite, zero or negative is dropped, never handed to the detector.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wrapper.decision import Decision
from wrapper.errors import ReschedError
from wrapper.redact import redact_data

HISTORY_FILE = "history.json"
LOCK_FILE = "history.lock"
SCHEMA_VERSION = 1
# Thousands of attempts are a few MB; anything far larger is not a history we wrote.
MAX_HISTORY_BYTES = 64 * 1024 * 1024
# A hang timeout read back beyond this is damage, not calibration (see wrapper.hang).
_MAX_HANG_TIMEOUT_S = 7 * 86400.0
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
    node_replacement: bool = False  # ...and that move spent no failure budget

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
                   exclude_node=record.get("exclude_node") is True,
                   node_replacement=record.get("node_replacement") is True)


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
    if not isinstance(nodes, Mapping) or not all(_is_count(v) for v in nodes.values()):
        raise HistoryCorrupted("node_failures is not a mapping of counts")
    step = data.get("last_progress_step")
    if step is not None and not _is_count(step):
        raise HistoryCorrupted("last_progress_step is not a whole number >= 0")
    return History(
        attempts=attempts,
        node_failures={str(k): int(v) for k, v in nodes.items()},
        last_progress_step=step,
        calibrated_hang_timeout=_hang_timeout(data.get("calibrated_hang_timeout")),
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _hang_timeout(value: Any) -> float | None:
    """A usable calibrated timeout, or None: NaN / inf / 0 / negative must not reach the
    detector, where they would switch detection off or kill a healthy training."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and 0 < seconds <= _MAX_HANG_TIMEOUT_S else None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:200] or type(error).__name__


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
    hang = _hang_timeout(outcome.get("calibrated_hang_timeout"))
    return History(
        attempts=history.attempts + (dict(outcome),),
        node_failures=nodes,
        last_progress_step=progress,
        calibrated_hang_timeout=hang if hang is not None else history.calibrated_hang_timeout,
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
        usable = _hang_timeout(seconds)
        return self._update(lambda h: History(h.attempts, h.node_failures, h.last_progress_step,
                                              usable if usable is not None else h.calibrated_hang_timeout))

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
            fd = self._open_lock()
        except OSError as error:
            raise self._error("cannot lock", error) from error
        with os.fdopen(fd, "r+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _open_lock(self) -> int:
        """The lock file, never through a link (ELOOP) nor a FIFO or device."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(self._lock_path, flags, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "the lock file is not a regular file")
        return fd

    def _move_aside(self, path: Path) -> Path:
        """Rename ``path`` (whatever it is: file, link, directory, FIFO) to a free name."""
        stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        for n in range(1000):
            kept = path.with_name(f"{path.name}.corrupt-{stamp}" + (f"-{n}" if n else ""))
            if not os.path.lexists(kept):
                os.rename(path, kept)  # renames a link itself, never its target
                return kept
        raise OSError(errno.EEXIST, "no free name to keep the damaged file under")

    def _read_text(self) -> str:
        """The file's text; HistoryCorrupted when it is not a regular UTF-8 file we could
        have written (a link, directory, FIFO, device, far too large, not UTF-8)."""
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            raise
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise HistoryCorrupted("it is a symbolic link, not a file resched wrote") from None
            raise HistoryCorrupted(f"cannot read it: {error.strerror or error}") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise HistoryCorrupted(f"it is {kind}")
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_HISTORY_BYTES + 1)
        if len(data) > MAX_HISTORY_BYTES:
            raise HistoryCorrupted(f"it is larger than {MAX_HISTORY_BYTES // (1024 * 1024)} MiB")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise HistoryCorrupted(f"not UTF-8 text at byte {error.start}") from None

    def _read(self, *, repair: bool = True) -> History:
        """Read under the lock; a corrupted file is moved aside (kept) and history restarts."""
        try:
            return _parse(json.loads(self._read_text()))
        except FileNotFoundError:
            return History()
        except (ValueError, RecursionError, HistoryCorrupted) as error:
            problem = "nested too deeply" if isinstance(error, RecursionError) else _one_line(error)
            if not repair:
                self._warn(f"resched: warning: history file {self.path} is corrupted ({problem}); "
                           "using an empty history (the file is left as it is)")
                return History()
            try:
                kept = self._move_aside(self.path)
            except OSError as move_error:
                raise self._error("cannot move aside the corrupted", move_error) from None
            self._warn(
                f"resched: warning: history file {self.path} is corrupted ({problem}); "
                f"kept it as {kept}; starting with an empty history"
            )
            return History()

    def _write(self, history: History) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".history.", suffix=".tmp", dir=self.state_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                # History travels with the checkpoint (the store uploads it): no credential
                # from the training's command line, environment or log goes with it.
                safe = redact_data(json.loads(json.dumps(history.to_dict(), default=str)))
                json.dump(safe, handle, indent=1, sort_keys=True, default=str)
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
