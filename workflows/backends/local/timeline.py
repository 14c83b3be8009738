"""The run's timeline: every event with its wall-clock time, from the executor and the task.

Sources:
- the executor itself (task started / ended, fault injected, decision, restart,
  checkpoint uploaded, inputs staged);
- the wrapper's stderr lines ``resched: event <name> <json>`` (attempt_started,
  failure_detected, decision, checkpoint_restored);
- the training's own progress lines, read with the one table of them
  (:mod:`wrapper.progress_lines`): resched's example protocol (``resched-train: step N``)
  and the frameworks' own (the Hugging Face Trainer's progress bar, Lightning's restore
  and finish lines, Megatron's ``iteration N/ M |``, NeMo, DeepSpeed), split at ``\r``
  as well as ``\n`` (progress bars redraw with ``\r``);
- the training's checkpoint folder (:mod:`.ckpt_progress`): a new complete step there is
  a save, for trainings that print nothing resched reads (Lightning, DCP).
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
from wrapper.progress_lines import ProgressKind, ProgressMatch, matches

# searched, not matched at the start: the wrapper's line may follow a progress bar that
# the training left without a line end (tqdm's last redraw before a crash)
_WRAPPER_EVENT = re.compile(r"(?:^|\]|\r)\s*resched: event (?P<name>[a-z_]+) (?P<json>\{.*\})\s*$")
# progress kind -> timeline event kind
_EVENT_KIND = {
    ProgressKind.STEP: "step", ProgressKind.RESUMED: "training_resumed",
    ProgressKind.SAVED: "checkpoint_saved", ProgressKind.LOADED: "checkpoint_loaded",
    ProgressKind.FINISHED: "training_finished", ProgressKind.CHECKSUM: "final_checksum",
}


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


def parse_line(line: str, task: str, timeline: Timeline, *, attempt: int,
               resumed_step: Callable[[], int | None] | None = None) -> Event | None:
    """Turn one output line of ``task`` into timeline events; returns the last one.

    ``resumed_step`` names the step a resume line loaded when the line does not (Lightning
    restores ``last.ckpt``): the step its checkpoint folder holds at that moment."""
    text = strip_ansi(line).rstrip("\r\n")
    match = _WRAPPER_EVENT.search(text) if "resched: event " in text else None
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
    last = None
    for found in matches(text):
        fields = _fields(found)
        if found.kind is ProgressKind.RESUMED and found.step is None and resumed_step is not None:
            step = resumed_step()
            if step is not None:
                fields.update(step=step, step_from="checkpoint-folder")
        last = timeline.add(_EVENT_KIND[found.kind], task, attempt=attempt, **fields)
    return last


def _fields(found: ProgressMatch) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if found.kind is ProgressKind.LOADED:
        out["load_s"] = found.seconds  # splits a restart's start-up into torch and loading
    elif found.kind is ProgressKind.CHECKSUM:
        out["checksum"] = found.checksum
    else:
        if found.step is not None or found.kind in (ProgressKind.STEP, ProgressKind.SAVED):
            out["step"] = found.step
        if found.kind is ProgressKind.SAVED and found.seconds is not None:
            out["save_s"] = found.seconds
    if found.pattern.framework != "resched":
        out["source"] = found.pattern.id
    if found.total is not None:
        out["total"] = found.total
    return out
