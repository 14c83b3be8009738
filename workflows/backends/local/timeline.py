"""The run's timeline: every event with its wall-clock time, from the executor and the task.

Sources:
- the executor itself (task started / ended, fault injected, decision, restart,
  checkpoint uploaded, inputs staged);
- the wrapper's stderr lines ``resched: event <name> <json>`` (attempt_started,
  failure_detected, decision, checkpoint_restored);
- the training's stdout lines ``resched-train: step N ...``, ``resumed from step N``,
  ``checkpoint step N save_s S`` and ``final checksum H``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wrapper.classifier.launcher_logs import strip_ansi

_WRAPPER_EVENT = re.compile(r"^resched: event (?P<name>[a-z_]+) (?P<json>\{.*\})\s*$")
_STEP = re.compile(r"^resched-train: step (?P<step>\d+)\b")
_RESUMED = re.compile(r"^resched-train: resumed from step (?P<step>\d+)")
_SAVED = re.compile(r"^resched-train: checkpoint step (?P<step>\d+)(?: save_s (?P<s>[0-9.]+))?")
_CHECKSUM = re.compile(r"^resched-train: final checksum (?P<sum>[0-9a-fA-F]+)")
_LOADED = re.compile(r"^resched-train: checkpoint loaded in (?P<s>[0-9.]+) s")


@dataclass(frozen=True)
class Event:
    t: float  # time.time()
    kind: str
    task: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"t": round(self.t, 4), "kind": self.kind, "task": self.task, **self.fields}


class Timeline:
    """Append-only, thread-safe list of events (reader threads add, the loop reads)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Event], None]] = []
        self.clock = clock

    def add(self, kind: str, task: str | None = None, /, *, t: float | None = None,
            **fields: Any) -> Event:
        event = Event(t=self.clock() if t is None else t, kind=kind, task=task, fields=fields)
        with self._lock:
            self._events.append(event)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(event)
        return event

    def listen(self, listener: Callable[[Event], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    @property
    def events(self) -> tuple[Event, ...]:
        with self._lock:
            return tuple(sorted(self._events, key=lambda e: e.t))


def parse_line(line: str, task: str, timeline: Timeline, *, attempt: int) -> Event | None:
    """Turn one output line of ``task`` into a timeline event when it is one."""
    text = strip_ansi(line).rstrip("\r\n")
    match = _WRAPPER_EVENT.match(text)
    if match:
        try:
            data = json.loads(match.group("json"))
        except json.JSONDecodeError:
            return None
        if not isinstance(data, dict):
            return None
        at = data.pop("t", None)
        stamp = float(at) if isinstance(at, (int, float)) else None
        data = {(f"w_{k}" if k in ("kind", "task", "attempt") else k): v for k, v in data.items()}
        return timeline.add(f"wrapper_{match.group('name')}", task, t=stamp, attempt=attempt, **data)
    for pattern, kind in ((_STEP, "step"), (_RESUMED, "training_resumed"), (_SAVED, "checkpoint_saved")):
        match = pattern.match(text)
        if match:
            extra: dict[str, Any] = {"step": int(match.group("step"))}
            if kind == "checkpoint_saved" and match.group("s"):
                extra["save_s"] = float(match.group("s"))
            return timeline.add(kind, task, attempt=attempt, **extra)
    match = _LOADED.match(text)
    if match:  # splits a restart's start-up into starting torch and loading
        return timeline.add("checkpoint_loaded", task, attempt=attempt, load_s=float(match.group("s")))
    match = _CHECKSUM.match(text)
    if match:
        return timeline.add("final_checksum", task, attempt=attempt, checksum=match.group("sum"))
    return None
