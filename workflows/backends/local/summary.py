"""The run's report: attempts, faults, where the time went, and the final line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from workflows.backends.local.ettr import ettr_lines, time_breakdown
from workflows.backends.local.plan import LocalPlan
from workflows.backends.local.report import fault_metrics, run_metrics, summary_line
from workflows.backends.local.timeline import Event

if TYPE_CHECKING:
    from workflows.backends.local.executor import RunResult


def build_report(plan: LocalPlan, result: RunResult, events: Sequence[Event]) -> dict[str, Any]:
    wall = result.ended_at - result.started_at
    faults = fault_metrics(events)
    metrics = run_metrics(events, faults, wall)
    attempts = [attempt_detail(a, events) for a in result.attempts]
    checksums = [e.fields["checksum"] for e in events if e.kind == "final_checksum"]
    return {
        "run_id": plan.run_id,
        "workflow": plan.workflow_name,
        "workdir": str(plan.workdir),
        "status": result.status,
        "reason": result.reason,
        "started_at": result.started_at,
        "ended_at": result.ended_at,
        "groups": result.group_status,
        "max_retry_per_task": plan.options.max_retry_per_task,
        "chaos": plan.options.chaos,
        "chaos_not_fired": list(result.chaos_not_fired),
        "chaos_notes": list(result.chaos_notes),
        "final_checksum": checksums[-1] if checksums else None,
        "attempts": attempts,
        "faults": faults,
        "metrics": metrics,
        "time_breakdown": time_breakdown(events, faults, metrics),
        "not_emulated": list(plan.not_emulated),
        "events": _with_derived_events(events, faults),
        "summary": summary_line(result.status, metrics),
    }


def _with_derived_events(events: Sequence[Event], faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The timeline plus, per fault, its ``first_new_step`` and ``caught_up`` moments."""
    out = [e.to_json() for e in events]
    for fault in faults:
        for key, kind in (("t_first_new_step", "first_new_step"), ("t_caught_up", "caught_up")):
            if fault.get(key) is not None:
                out.append({"t": round(fault[key], 4), "kind": kind, "task": fault["task"],
                            "fault": fault["spec"], "derived": True})
    return sorted(out, key=lambda e: e["t"])


def attempt_detail(record: dict[str, Any], events: Sequence[Event]) -> dict[str, Any]:
    """Add the checkpoint steps seen during this attempt to its record."""
    mine = [e for e in events if e.task == record["task"] and e.fields.get("attempt") == record["attempt"]]
    steps = [e.fields["step"] for e in mine if e.kind == "step"]
    resumed = [e.fields["step"] for e in mine if e.kind == "training_resumed"
               and e.fields.get("step") is not None]
    saved = [e.fields["step"] for e in mine if e.kind == "checkpoint_saved"]
    uploads = [e.fields.get("step") for e in events if e.task == record["task"]
               and e.kind == "checkpoint_uploaded"
               and record["started_at"] <= e.t <= record["ended_at"] + 1e-3]
    # A training that does not say where it resumed (no resched-train line): the step of
    # the checkpoint staged into this pod (the marker's, else its framework's files).
    staged = [e.fields["step"] for e in events if e.task == record["task"]
              and e.kind == "inputs_staged" and e.fields.get("step") is not None
              and e.fields.get("retry_id") == record.get("retry_id")
              and e.t <= record["started_at"] + 1e-3]
    return {
        **record,
        "wall_s": round(record["ended_at"] - record["started_at"], 3),
        "resumed_from_step": resumed[0] if resumed else (staged[-1] if staged else None),
        "first_step": steps[0] if steps else None,
        "last_step": steps[-1] if steps else None,
        "checkpoints_saved": saved,
        "checkpoints_uploaded": uploads,
    }


def report_lines(report: dict[str, Any]) -> list[str]:
    lines = ["", f"run {report['run_id']}: {report['status']}"
             + (f" ({report['reason']})" if report.get("reason") else "")]
    lines.append(f"{'task':<12} {'att':>3} {'pod':>3} {'start':>7} {'end':>7} {'exit':>5}  "
                 f"{'action':<10} {'status':<10} {'wrapper':<28} ckpt steps")
    t0 = report["started_at"]
    for a in report["attempts"]:
        wrapper = a.get("wrapper") or {}
        said = f"{wrapper.get('decision', '')} {wrapper.get('rule') or ''}".strip() or "-"
        ckpt = (f"resumed {a['resumed_from_step']} " if a["resumed_from_step"] is not None else "") + (
            f"saved {a['checkpoints_saved'][-1]} " if a["checkpoints_saved"] else "") + (
            f"uploaded {a['checkpoints_uploaded'][-1]}" if a["checkpoints_uploaded"] else "")
        lines.append(
            f"{a['task']:<12} {a['attempt']!s:>3} {a.get('retry_id')!s:>3} {a['started_at'] - t0:>6.1f}s "
            f"{a['ended_at'] - t0:>6.1f}s {a.get('exit_code')!s:>5}  {a.get('action') or '-':<10} "
            f"{a.get('status')!s:<10} {said[:28]:<28} {ckpt.strip() or '-'}")
    lines.extend(_fault_line(f) for f in report["faults"])
    for spec in report.get("chaos_not_fired") or []:
        why = ("too few newer checkpoint steps were uploaded" if spec.endswith("ckpt")
               else "the training never reported that step" if spec.endswith("step")
               else "its task was not running at that time")
        lines.append(f"fault {spec}: not injected ({why})")
    lines.extend(report.get("chaos_notes") or [])
    lines.extend(ettr_lines(report["metrics"], report["time_breakdown"], report.get("baseline")))
    if report.get("final_checksum"):
        lines.append(f"final checksum {report['final_checksum']}")
    return lines


def _fault_line(fault: dict[str, Any]) -> str:
    if fault["step_before"] is None:
        what = "before the first training step"
    elif fault["interrupted"]:
        what = f"at step {fault['step_before']}; the next fault came before it resumed"
    else:
        what = (f"resumed {_s(fault['resume_s'])} later, lost {fault.get('lost_steps', '?')} steps "
                f"(step {fault['step_before']} -> restored {fault['restored_step']})")
    return (f"fault {fault['spec']}: detected {_s(fault['detection_s'])}, {what}, "
            f"decision {fault.get('decision') or '?'}")


def _s(value: float | None) -> str:
    return f"{value:.1f} s" if value is not None else "?"
