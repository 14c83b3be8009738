"""From a run report to what the timeline draws: one lane per task, spans and marks.

Pure: times are seconds since the run started; the HTML module turns them into pixels.
A span is something that lasts (an attempt, the wrapper's in-place attempts, a fault's
recovery window); a mark is a moment (fault, detection, decision, restart, restore,
checkpoint save or upload with its step).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Span:
    kind: str  # attempt | inplace | recovery
    start: float
    end: float
    label: str
    tip: str
    status: str = ""


@dataclass(frozen=True)
class Mark:
    kind: str  # fault | detect | decision | restart | restore | upload | save | upload-failed | staged
    t: float
    label: str
    tip: str


@dataclass(frozen=True)
class Lane:
    task: str
    spans: tuple[Span, ...]
    marks: tuple[Mark, ...]
    steps: tuple[tuple[float, int], ...]  # (t, step) of the training's step lines


# event kind -> (mark kind, how its short label is made from the fields)
_MARKS: dict[str, str] = {
    "fault_injected": "fault",
    "wrapper_failure_detected": "detect",
    "failure_detected": "detect",
    "wrapper_decision": "decision",
    "decision": "decision",
    "attempt_restarted": "restart",
    "wrapper_checkpoint_restored": "restore",
    "wrapper_checkpoint_set_aside": "set-aside",  # torn saves moved aside (issue 19)
    "training_resumed": "restore",
    "checkpoint_uploaded": "upload",
    "checkpoint_upload_failed": "upload-failed",
    "checkpoint_saved": "save",
    "inputs_staged": "staged",
}
_TIP_SKIP = {"t", "kind", "task", "derived", "command", "pids", "url"}


def _label(kind: str, event: Mapping[str, Any]) -> str:
    step = event.get("step")
    if kind == "fault":
        return str(event.get("spec") or event.get("fault") or "fault")
    if kind == "detect":
        if event.get("hung") or event.get("w_kind") == "hang":
            return "hang"
        if event.get("signal"):
            return f"sig {event['signal']}"
        return f"exit {event.get('exit_code', '?')}"
    if kind == "decision":
        return str(event.get("decision") or event.get("action") or "?")
    if kind == "set-aside":
        moved = event.get("moved") or []
        return f"{len(moved)} torn aside" if moved else "pointer fixed"
    if kind == "restart":
        return str(event.get("mode") or "restart")
    if kind in ("restore", "upload", "save", "staged"):
        return f"step {step}" if step is not None else ("no ckpt" if kind == "staged" else "?")
    return kind


def _tip(title: str, t: float, event: Mapping[str, Any]) -> str:
    fields = [f"{k}={event[k]}" for k in sorted(event) if k not in _TIP_SKIP and event[k] not in (None, "")]
    return f"{title} at {t:.2f} s" + (": " + ", ".join(fields) if fields else "")


def build_lanes(report: Mapping[str, Any]) -> list[Lane]:
    """One lane per task, in the order tasks first appear in the run."""
    t0 = float(report["started_at"])
    events: Sequence[Mapping[str, Any]] = report["events"]
    attempts: Sequence[Mapping[str, Any]] = report["attempts"]
    order: list[str] = []
    named = [a.get("task") for a in attempts] + [e.get("task") for e in events
                                                  if e.get("kind") in _MARKS or e.get("kind") == "step"]
    for task in named:
        if isinstance(task, str) and task not in order:
            order.append(task)
    lanes = []
    for task in order:
        mine = [e for e in events if e.get("task") == task and not e.get("derived")]
        spans = [_attempt_span(a, t0) for a in attempts if a.get("task") == task]
        spans += _inplace_spans(mine, [a for a in attempts if a.get("task") == task], t0)
        spans += [Span("recovery", f["t_fault"] - t0, f["t_first_new_step"] - t0, "recovery",
                       f"recovery from {f.get('spec')}: detection {f.get('detection_s')} s, "
                       f"resume {f.get('resume_s')} s, lost {f.get('lost_steps', '?')} steps")
                  for f in report.get("faults", []) if f.get("task") == task
                  and f.get("t_first_new_step") is not None]
        marks = []
        for event in mine:
            kind = _MARKS.get(str(event.get("kind")))
            if kind is None:
                continue
            t = float(event["t"]) - t0
            marks.append(Mark(kind, t, _label(kind, event), _tip(str(event["kind"]).replace("_", " "), t, event)))
        steps = tuple((float(e["t"]) - t0, int(e["step"])) for e in mine
                      if e.get("kind") == "step" and isinstance(e.get("step"), int))
        lanes.append(Lane(task, tuple(spans), tuple(sorted(marks, key=lambda m: m.t)), steps))
    return lanes


def _attempt_span(record: Mapping[str, Any], t0: float) -> Span:
    wrapper = record.get("wrapper") or {}
    said = f", wrapper {wrapper.get('decision')}" + (f" ({wrapper['rule']})" if wrapper.get("rule") else "") \
        if wrapper.get("decision") else ""
    label = f"pod {record.get('retry_id')} · exit {record.get('exit_code')}"
    tip = (f"{record.get('task')} attempt {record.get('attempt')} (pod {record.get('retry_id')}): "
           f"{record.get('status')}, exit {record.get('exit_code')}, action {record.get('action') or '-'}"
           f"{said}" + (f"; resumed from step {record['resumed_from_step']}"
                        if record.get("resumed_from_step") is not None else ""))
    return Span("attempt", float(record["started_at"]) - t0, float(record["ended_at"]) - t0, label, tip,
                status=str(record.get("status") or ""))


def _inplace_spans(events: Sequence[Mapping[str, Any]], attempts: Sequence[Mapping[str, Any]],
                   t0: float) -> list[Span]:
    """The wrapper's own attempts inside one executor attempt (in-place retries)."""
    spans = []
    for record in attempts:
        start, end = float(record["started_at"]), float(record["ended_at"])
        starts = [e for e in events if e.get("kind") == "wrapper_attempt_started" and start <= e["t"] <= end]
        for index, event in enumerate(starts):
            stop = starts[index + 1]["t"] if index + 1 < len(starts) else end
            number = event.get("w_attempt", index + 1)
            spans.append(Span("inplace", float(event["t"]) - t0, float(stop) - t0, f"try {number}",
                              f"wrapper attempt {number} at {float(event['t']) - t0:.2f} s"))
    return spans
