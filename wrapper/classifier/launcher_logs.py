"""Recover per-rank exit codes and the root-cause rank that torchrun / ft_launcher hide.

Both launchers turn a worker's exit 16 / 17 (or an exception) into their own exit 1.
Three artifacts still say what happened, and this module reads all three:

- torchelastic error files (``@record`` writes ``{"message": {"message": "<Type>:
  <msg>", "extraInfo": {"py_callstack": ..., "timestamp": "<epoch>"}}}``; the agent's
  copy adds ``errorCode``);
- the launcher's ``ChildFailedError`` failure summary (``rank : N``, ``exitcode : N
  (pid: P)``, ``time``, ``error_file``, ``traceback`` per failure, and a
  ``Root Cause (first observed failure)`` section), plus the agent's
  ``failed (exitcode: N) local_rank: R`` line;
- the Megatron tracker file (``ts= node= device= jobID= rank= iteration= status=
  result= message=`` per line).

The root cause is the earliest failure, not the cascade: the launcher's own root-cause
entry when it printed one, otherwise the smallest timestamp, preferring a rank that was
not merely SIGTERMed by the agent after another rank failed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# an exception line that closes a traceback: the class (dotted) and its message
EXCEPTION_LINE = re.compile(
    # the bare class too ("Exception: ..."), but not a bare "Error: ..." (a plain log line)
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)|Exception|[A-Za-z_][\w.]*Error\w*)"
    r"(?::\s?(.*))?$"
)
_SUMMARY_FIELD_RE = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_SUMMARY_RANK_RE = re.compile(r"(-?\d+)(?:\s*\(local_rank:\s*(\d+)\))?")
_SUMMARY_EXIT_RE = re.compile(r"(-?\d+)\s*\(pid:\s*(\d+)\)")
_AGENT_FAILED_RE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_ERROR_FILE_RANK_RE = re.compile(r"/attempt_\d+/(\d+)/error\.json$")
_TRACKER_KEY_RE = re.compile(r"(?:^|\s)([A-Za-z_]+)=")
_AGENT_SIGTERM_CODES = (-15, 143)  # the agent stops the other workers with SIGTERM
# The exception a rank raises when the launcher's SIGTERM itself stopped it.
_STOPPED_MESSAGE_RE = re.compile(r"SignalException|got signal: 15|SIGTERM received", re.IGNORECASE)
# What a rank dies of when a PEER failed first (failure-taxonomy: cascades).
_CASCADE_MESSAGE_RE = re.compile(
    r"Connection (?:closed|reset) by peer|communicator was aborted"
    r"|Watchdog caught collective operation timeout|watchdog thread terminated with exception",
    re.IGNORECASE,
)


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text) if "\x1b" in text else text


@dataclass(frozen=True)
class RankFailure:
    """One failed worker as one artifact reports it."""

    rank: int | None
    exit_code: int | None
    source: str
    lineno: int = 0
    local_rank: int | None = None
    timestamp: float | None = None
    exception_type: str | None = None
    message: str = ""
    error_file: str | None = None
    host: str | None = None
    marked_root_cause: bool = False

    @property
    def signal(self) -> int | None:
        """The signal that killed the worker (torchelastic reports it as -N)."""
        if self.exit_code is not None and self.exit_code < 0:
            return -self.exit_code
        return None

    def describe(self) -> str:
        if self.rank is not None:
            parts = [f"rank {self.rank}"]
        else:
            parts = [f"local rank {self.local_rank}" if self.local_rank is not None else "a worker"]
        if self.exit_code is not None:
            parts.append(f"signal {self.signal}" if self.signal else f"exit {self.exit_code}")
        if self.exception_type:
            parts.append(f"{self.exception_type}: {self.message}".rstrip(": ")[:200])
        return ", ".join(parts)


@dataclass(frozen=True)
class TrackerEvent:
    """One line of the Megatron --result-rejected-tracker-filename file."""

    fields: Mapping[str, str]
    source: str
    lineno: int
    text: str

    @property
    def status(self) -> str | None:
        return self.fields.get("status")

    @property
    def rank(self) -> int | None:
        return _int_or_none(self.fields.get("rank"))


@dataclass(frozen=True)
class LauncherReport:
    failures: tuple[RankFailure, ...] = ()
    root_cause: RankFailure | None = None
    tracker_events: tuple[TrackerEvent, ...] = field(default=())

    @property
    def rank_exit_codes(self) -> dict[int, int]:
        """Exit code per rank: the global rank, or the local rank when an artifact named
        only that (an agent's ``failed (exitcode ...) local_rank: R`` line, an error file
        found without a failure summary)."""
        codes: dict[int, int] = {}
        for failure in self.failures:
            rank = failure.rank if failure.rank is not None else failure.local_rank
            if rank is not None and failure.exit_code is not None:
                codes.setdefault(rank, failure.exit_code)
        return dict(sorted(codes.items()))

    @property
    def root_cause_rank(self) -> int | None:
        root = self.root_cause
        if root is not None and (root.rank is not None or root.local_rank is not None):
            return root.rank if root.rank is not None else root.local_rank
        for event in reversed(self.tracker_events):
            if event.rank is not None:
                return event.rank
        return None

    @property
    def exception_types(self) -> tuple[str, ...]:
        """Exception types, the root cause's first."""
        ordered = ([self.root_cause] if self.root_cause else []) + list(self.failures)
        seen: dict[str, None] = {}
        for failure in ordered:
            if failure.exception_type:
                seen.setdefault(failure.exception_type, None)
        return tuple(seen)


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def split_exception(message: str) -> tuple[str | None, str]:
    """``"KeyError: 'x'"`` -> ``("KeyError", "'x'")``; not an exception line -> (None, message)."""
    found = EXCEPTION_LINE.match(message.strip())
    if not found:
        return None, message
    return found.group(1), (found.group(2) or "").strip()


def parse_error_file(path: Path) -> RankFailure | None:
    """Read one torchelastic error file; None when it is missing or not JSON."""
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, Mapping):
        return None
    message_obj = data.get("message")
    text, timestamp = "", None
    if isinstance(message_obj, Mapping):
        text = str(message_obj.get("message", ""))
        extra = message_obj.get("extraInfo") or {}
        if isinstance(extra, Mapping):
            timestamp = _float_or_none(extra.get("timestamp"))
    elif isinstance(message_obj, str):
        text = message_obj
    if timestamp is None:
        timestamp = _float_or_none(data.get("timestamp"))
    exc_type, msg = split_exception(text.splitlines()[0] if text else "")
    rank_match = _ERROR_FILE_RANK_RE.search(str(path))
    local_rank = int(rank_match.group(1)) if rank_match else None
    rank = _int_or_none(str(data["rank"])) if "rank" in data else local_rank
    code = data.get("errorCode")
    return RankFailure(
        rank=rank,
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        source=str(path),
        lineno=1,
        local_rank=local_rank,
        timestamp=timestamp,
        exception_type=exc_type,
        message=msg,
        error_file=str(path),
    )


def error_file_text_lines(path: Path) -> list[str]:
    """The message and callstack of an error file, as lines a LineScanner can scan."""
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return []
    message_obj = data.get("message") if isinstance(data, Mapping) else None
    if isinstance(message_obj, str):
        return message_obj.splitlines()
    if not isinstance(message_obj, Mapping):
        return []
    lines = str(message_obj.get("message", "")).splitlines()
    extra = message_obj.get("extraInfo") or {}
    if isinstance(extra, Mapping):
        lines += str(extra.get("py_callstack", "")).splitlines()
    return lines


def _float_or_none(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _summary_time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.strip().replace("_", "T")).timestamp()
    except ValueError:
        return None


def parse_failure_summary(lines: Sequence[str], source: str = "log", first_lineno: int = 1) -> list[RankFailure]:
    """Failures listed in ChildFailedError tables (and agent ``failed (exitcode`` lines)."""
    failures: list[RankFailure] = []
    current: dict[str, Any] | None = None
    in_root = in_table = False
    for offset, raw in enumerate(lines):
        line = strip_ansi(raw).rstrip("\n")
        lineno = first_lineno + offset if first_lineno > 0 else 0  # 0: position unknown
        if "Root Cause (first observed failure)" in line or line.strip() == "Failures:":
            in_root, in_table = "Root Cause" in line, True
            continue
        if in_table and line.strip().startswith("====="):  # the table's closing border
            in_table = in_root = False
        agent = _AGENT_FAILED_RE.search(line)
        if agent:
            failures.append(RankFailure(
                rank=None, local_rank=int(agent.group(2)), exit_code=int(agent.group(1)),
                source=source, lineno=lineno,
            ))
            continue
        found = _SUMMARY_FIELD_RE.match(line) if in_table else None
        if not found:
            if current is not None and current.get("in_traceback"):
                _note_traceback_line(current, line)
            continue
        key, value = found.group(1), found.group(2).strip()
        if key == "time":
            if current is not None:
                failures.append(_finish_entry(current, source))
            current = {"time": _summary_time(value), "root": in_root, "lineno": lineno}
        elif current is not None:
            current["in_traceback"] = key == "traceback"
            current[key] = value
            if key == "exitcode":  # evidence points at the line that shows the code
                current["lineno"] = lineno
            if key == "traceback":
                _note_traceback_line(current, value)
    if current is not None:
        failures.append(_finish_entry(current, source))
    return [f for f in failures if f.rank is not None or f.local_rank is not None]


def _note_traceback_line(entry: dict[str, Any], line: str) -> None:
    text = line.strip()
    if text.startswith("Traceback"):  # a (chained) traceback starts: its exception counts
        entry.pop("exception", None)
        return
    if "exception" in entry:  # lines after the exception line continue its message
        return
    exc_type, msg = split_exception(text)
    if exc_type:
        entry["exception"] = (exc_type, msg)


def _finish_entry(entry: Mapping[str, Any], source: str) -> RankFailure:
    rank_match = _SUMMARY_RANK_RE.match(str(entry.get("rank", "")))
    exit_match = _SUMMARY_EXIT_RE.match(str(entry.get("exitcode", "")))
    exc_type, msg = entry.get("exception", (None, ""))
    error_file = entry.get("error_file")
    return RankFailure(
        rank=int(rank_match.group(1)) if rank_match else None,
        local_rank=int(rank_match.group(2)) if rank_match and rank_match.group(2) else None,
        exit_code=int(exit_match.group(1)) if exit_match else None,
        source=source,
        lineno=int(entry.get("lineno", 0)),
        timestamp=entry.get("time"),
        exception_type=exc_type,
        message=msg,
        error_file=None if error_file in (None, "<N/A>") else str(error_file),
        host=entry.get("host"),
        marked_root_cause=bool(entry.get("root")),
    )


def parse_tracker(path: Path) -> list[TrackerEvent]:
    """Events of a Megatron tracker file; unreadable -> []. ``message=`` takes the rest."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    events = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        fields = parse_tracker_line(line)
        if fields:
            events.append(TrackerEvent(fields=fields, source=str(path), lineno=lineno, text=line.strip()))
    return events


def parse_tracker_line(line: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    keys = list(_TRACKER_KEY_RE.finditer(line))
    for i, key in enumerate(keys):
        if key.group(1) == "message":
            fields["message"] = line[key.end():].strip()
            break
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        fields[key.group(1)] = line[key.end():end].strip().strip('"')
    return fields if "status" in fields or "result" in fields else {}


def _merge(failures: Iterable[RankFailure]) -> list[RankFailure]:
    """One entry per rank: summary entries enriched by their error files."""
    by_key: dict[tuple[str, Any], RankFailure] = {}
    order: list[tuple[str, Any]] = []
    for failure in failures:
        if failure.rank is not None:
            key: tuple[str, Any] = ("rank", failure.rank)
        elif failure.local_rank is not None:
            key = ("local", failure.local_rank)
        else:  # e.g. the launcher's own error file: it names no rank
            key = ("file", failure.error_file or failure.source)
        if failure.rank is None:
            # an agent line names only the local rank: attach it to a known rank if one matches
            for known_key, candidate in by_key.items():
                if candidate.local_rank == failure.local_rank and known_key[0] == "rank":
                    key = known_key
                    break
        known = by_key.get(key)
        if known is None:
            by_key[key] = failure
            order.append(key)
            continue
        from_file = failure.error_file is not None and failure.source == failure.error_file
        by_key[key] = replace(
            known,
            exit_code=known.exit_code if known.exit_code is not None else failure.exit_code,
            timestamp=known.timestamp if known.timestamp is not None else failure.timestamp,
            # the error file is what @record wrote: its exception beats the summary's excerpt
            exception_type=(failure.exception_type if from_file else None)
            or known.exception_type or failure.exception_type,
            message=(failure.message if from_file and failure.exception_type else "") or known.message or failure.message,
            error_file=known.error_file or failure.error_file,
            marked_root_cause=known.marked_root_cause or failure.marked_root_cause,
        )
    return [by_key[k] for k in order]


def _root_cause(failures: Sequence[RankFailure]) -> RankFailure | None:
    if not failures:
        return None
    # The launcher's own pick is trusted unless it is a cascade while a real failure
    # exists: torchrun dates a worker without an error file by when it noticed the exit,
    # and a rank's error file by when its exception reached @record, so a peer that died
    # of the broken connection (or that torchrun then SIGTERMed) can look earlier than
    # the rank whose failure broke it.
    marked = [f for f in failures if f.marked_root_cause]
    best = _best_failure(failures)
    if not marked or marked[0] is best:
        return best
    pick = marked[0]
    if _cascade_level(pick) != _cascade_level(best):
        return pick if _cascade_level(pick) < _cascade_level(best) else best
    close = (pick.timestamp is not None and best.timestamp is not None
             and abs(pick.timestamp - best.timestamp) <= _SAME_MOMENT_S)
    return best if close and not pick.exception_type and best.exception_type else pick


# Failure times have one-second resolution (error files, the summary's `time`) and a
# rank's error file is written only after its exception unwound (gloo teardown first,
# seconds under load), while a peer that crashes silently in that teardown (SIGSEGV) is
# dated when torchrun notices it. Within this window the failure that says why wins: in
# a collective job every rank fails within moments of the first, and a silent crash
# next to an explained error is the cascade far more often than the cause.
_SAME_MOMENT_S = 30.0


def _best_failure(failures: Sequence[RankFailure]) -> RankFailure:
    """Least cascade-like; then, among failures at the same moment as the earliest, one
    with an exception (a peer that segfaulted while gloo tore down says nothing)."""
    level = min(_cascade_level(f) for f in failures)
    candidates = [f for f in failures if _cascade_level(f) == level]
    first = min(candidates, key=_root_cause_key)
    if first.exception_type or first.timestamp is None:
        return first
    near = [f for f in candidates if f.exception_type and f.timestamp is not None
            and f.timestamp - first.timestamp <= _SAME_MOMENT_S]
    return min(near, key=_root_cause_key) if near else first


def _cascade_level(failure: RankFailure) -> int:
    """0: a failure of its own; 1: died of a peer's failure; 2: stopped by the launcher.

    The recorded exception decides when there is one: a rank that raised its own error
    and was SIGTERMed by the launcher while exiting still failed first."""
    if failure.exception_type and not _STOPPED_MESSAGE_RE.search(
        f"{failure.exception_type}: {failure.message}"
    ):
        return 1 if _CASCADE_MESSAGE_RE.search(failure.message or "") else 0
    return 2 if failure.exit_code in _AGENT_SIGTERM_CODES else 0


def _root_cause_key(failure: RankFailure) -> tuple[int, float, int, int]:
    timestamp = failure.timestamp if failure.timestamp is not None else float("inf")
    silent = 0 if failure.exception_type else 1
    rank = failure.rank if failure.rank is not None else 1 << 30
    return (_cascade_level(failure), timestamp, silent, rank)


@dataclass(frozen=True)
class SummaryBlock:
    """Lines that may hold a failure summary, with where they came from
    (``first_lineno`` 0: a tail whose line numbers are unknown)."""

    source: str
    lines: tuple[str, ...]
    first_lineno: int = 1


def recover(
    *,
    error_files: Sequence[Path] = (),
    summaries: Sequence[SummaryBlock] = (),
    tracker_file: Path | None = None,
) -> LauncherReport:
    """Per-rank codes, the root-cause failure and tracker events from all artifacts."""
    from_summary = [
        failure
        for block in summaries
        for failure in parse_failure_summary(block.lines, source=block.source, first_lineno=block.first_lineno)
    ]
    from_files = [f for f in (parse_error_file(Path(p)) for p in error_files) if f is not None]
    # match error files to summary entries by path, so they take the summary's global rank
    summary_by_file = {f.error_file: f for f in from_summary if f.error_file}
    enriched = []
    for failure in from_files:
        entry = summary_by_file.get(failure.error_file) if failure.error_file else None
        enriched.append(replace(failure, rank=entry.rank) if entry is not None and entry.rank is not None else failure)
    failures = _merge(from_summary + enriched)
    events = tuple(parse_tracker(tracker_file)) if tracker_file is not None else ()
    return LauncherReport(failures=tuple(failures), root_cause=_root_cause(failures), tracker_events=events)
