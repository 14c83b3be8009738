"""Read a run's report back, check it, and recompute its numbers with today's formulas.

A run directory is what ``resched run --workdir DIR`` fills (``DIR/report.json``); a
report file written with ``--report FILE`` is accepted too. The numbers (faults, ETTR,
model, lost time) are recomputed from the stored timeline, so a report written by an
older resched is shown with the current, honest figures.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workflows.backends.local.ettr import compare_with_baseline, time_breakdown
from workflows.backends.local.report import fault_metrics, run_metrics, summary_line
from workflows.backends.local.summary import attempt_detail
from workflows.backends.local.timeline import Event
from workflows.errors import UsageError
from wrapper.redact import redact_data

REPORT_NAME = "report.json"
_FIX = "pass the --workdir of a finished `resched run` (default .resched/runs/<run id>) or its report.json"
_REQUIRED: Mapping[str, type | tuple[type, ...]] = {
    "run_id": str, "status": str, "started_at": (int, float), "ended_at": (int, float),
    "attempts": list, "events": list,
}

# event kind -> the fields the numbers are computed from: (key, type, required)
_FIELDS: Mapping[str, tuple[tuple[str, type | tuple[type, ...], bool], ...]] = {
    "step": (("step", int, True),),
    "checkpoint_saved": (("step", int, True), ("save_s", (int, float), False)),
    "checkpoint_uploaded": (("seconds", (int, float), True), ("step", int, False)),
    "training_resumed": (("step", int, False),),  # Lightning's last.ckpt names no step
    "wrapper_checkpoint_restored": (("step", int, False),),
}


def report_path(path: Path) -> Path:
    """The report file of ``path`` (a run directory, the file itself, or a run id)."""
    by_id = Path(".resched") / "runs" / path  # `resched run`'s default --workdir
    if not path.exists() and len(path.parts) == 1 and by_id.is_dir():
        path = by_id
    if not path.exists():
        raise UsageError("no such run directory or report file", where=str(path), fix=_FIX)
    if path.is_dir():
        found = path / REPORT_NAME
        if not found.is_file():
            why = ("the run has not finished (or was killed) and wrote no report.json"
                   if (path / "tasks").is_dir() else "not a run directory: it has no report.json")
            raise UsageError(why, where=str(path), fix=_FIX)
        return found
    return path


def load_report(path: Path) -> dict[str, Any]:
    """The checked report with ``faults``, ``metrics``, ``time_breakdown`` recomputed."""
    file = report_path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read the report: {error}", where=str(file), fix=_FIX) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"not valid JSON ({error.msg})", where=f"{file}:{error.lineno}:{error.colno}",
                         fix="the report is written whole at the end of a run; run it again") from None
    if not isinstance(data, dict):
        raise UsageError("not a resched run report (the top level is not an object)", where=str(file), fix=_FIX)
    for key, kind in _REQUIRED.items():
        if not isinstance(data.get(key), kind):
            raise UsageError(f"not a resched run report: key {key!r} is missing or of the wrong type",
                             where=f"{file} key {key}", fix=_FIX)
    events = _events(data["events"], file)
    _check_attempts(data["attempts"], file)
    data["attempts"] = [attempt_detail(a, events) for a in data["attempts"]]
    checksums = [e.fields.get("checksum") for e in events if e.kind == "final_checksum"]
    data["final_checksum"] = checksums[-1] if checksums else None
    faults = fault_metrics(events)
    metrics = run_metrics(events, faults, float(data["ended_at"]) - float(data["started_at"]))
    data.update(faults=faults, metrics=metrics, time_breakdown=time_breakdown(events, faults, metrics),
                summary=summary_line(data["status"], metrics), source=str(file))
    # everything shown comes from here: a store URL with a key in it never reaches a page
    return redact_data(data)  # type: ignore[no-any-return]


def add_baseline(report: dict[str, Any], baseline_path: Path) -> None:
    """Compare ``report`` with a fault-free run of the same workflow (the upper bound)."""
    baseline = load_report(baseline_path)
    where = str(baseline["source"])
    if baseline.get("workflow") != report.get("workflow"):
        raise UsageError(f"the baseline ran workflow {baseline.get('workflow')!r}, this run "
                         f"{report.get('workflow')!r}", where=where,
                         fix="pass a fault-free run of the same workflow and values")
    report["baseline"] = compare_with_baseline(report["metrics"], baseline, where=where)


def _events(raw: list[Any], file: Path) -> list[Event]:
    events = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("t"), (int, float)) \
                or not isinstance(item.get("kind"), str):
            raise UsageError("a timeline event needs a number 't' and a string 'kind'",
                             where=f"{file} events[{index}]", fix=_FIX)
        if item.get("derived"):
            continue  # recomputed below from the measured events
        for key, kinds, required in _FIELDS.get(item["kind"], ()):
            value = item.get(key)
            if (value is not None or required) and (not isinstance(value, kinds) or isinstance(value, bool)):
                raise UsageError(f"a {item['kind']} event needs a number {key!r}, got {value!r}",
                                 where=f"{file} events[{index}]", fix=_FIX)
        fields = {k: v for k, v in item.items() if k not in ("t", "kind", "task")}
        task = item.get("task")
        events.append(Event(t=float(item["t"]), kind=item["kind"],
                            task=task if isinstance(task, str) else None, fields=fields))
    return sorted(events, key=lambda e: e.t)


def _check_attempts(attempts: list[Any], file: Path) -> None:
    for index, item in enumerate(attempts):
        if not isinstance(item, dict) or not isinstance(item.get("started_at"), (int, float)) \
                or not isinstance(item.get("ended_at"), (int, float)) or not isinstance(item.get("task"), str) \
                or not isinstance(item.get("attempt"), int):
            raise UsageError("an attempt needs 'task', 'attempt', 'started_at' and 'ended_at'",
                             where=f"{file} attempts[{index}]", fix=_FIX)
