"""Honest ETTR: where the wall time went, and how the run compares with a fault-free one.

Three views, each answering a different question:
- the measured ETTR (useful time / wall time);
- against the same run without faults: the real upper bound on this machine, since a
  fault-free run still pays start-up and checkpoint saves (``--baseline``);
- against the Young/Daly model for the measured MTBF (:mod:`.report`), at the interval
  used and at the optimum: whether a different checkpoint interval would help.
And the lost time (wall - useful) split into start-up, detection, restart, lost work,
checkpoint overhead and the rest, with what to change for the largest part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workflows.backends.local.timeline import Event
from workflows.errors import UsageError

# breakdown key -> (label, what to change when it is the largest part)
LOST_PARTS: dict[str, tuple[str, str]] = {
    "startup": ("start-up", ("start-up before the first step: image, imports, input staging, "
                "process-group set-up")),
    "detection": ("detection", ("time from fault to detection: lower the hang timeout "
                  "(--hang-timeout auto) or add a heartbeat")),
    "restart_to_first_step": ("restart", ("detection to first new step: prefer in-place retries "
                              "over reschedules, load checkpoints faster")),
    "recomputed_lost_steps": ("lost work", ("steps recomputed after a restore: checkpoint more "
                              "often (Young's interval below)")),
    "checkpoint_saves": ("checkpoint", ("blocking checkpoint saves: checkpoint less often or "
                         "save asynchronously")),
    "other": ("other", "time none of the above explains (uploads, stops, scheduling)"),
}


def time_breakdown(events: Sequence[Event], faults: list[dict[str, Any]],
                   metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """Where the wall time went (seconds); ``other`` is what none of the rest explains.

    Read from the reference task only (the one that made the final model): parallel
    tasks save checkpoints at the same moments, summing theirs would count wall time twice.
    """
    task = metrics.get("reference_task")
    wall = metrics["wall_s"]
    step_s = metrics.get("step_s") or 0.0
    parts: dict[str, float | None] = {
        "startup": metrics.get("startup_s"),
        "useful_steps": metrics.get("useful_s"),
        "checkpoint_saves": round(sum(e.fields.get("save_s", 0.0) for e in events
                                      if e.kind == "checkpoint_saved" and e.task == task), 3),
        # a fault before the first step is paid for inside start-up: not counted twice
        "detection": round(sum(f["detection_s"] or 0.0 for f in _after_start(faults, metrics)), 3),
        # detection -> computing again: R minus the first new step's own compute, which is
        # lost work (recomputed) or useful time, not restart
        "restart_to_first_step": round(sum(max(0.0, (f["resume_s"] or 0.0) - step_s)
                                           for f in _after_start(faults, metrics)
                                           if f["resume_s"] is not None), 3),
        "recomputed_lost_steps": round(metrics.get("lost_steps", 0) * step_s, 3),
    }
    known = sum(v for v in parts.values() if v)
    parts["other"] = round(wall - known, 3)
    return parts


def _after_start(faults: list[dict[str, Any]], metrics: Mapping[str, Any]) -> list[dict[str, Any]]:
    first = metrics.get("first_step_t")
    return [f for f in faults if first is None or f["t_fault"] >= first]


def largest_loss(breakdown: Mapping[str, float | None]) -> tuple[str, float] | None:
    """The part of the lost time to fix first (never ``useful_steps``)."""
    lost = [(k, v) for k, v in breakdown.items() if k in LOST_PARTS and v and v > 0]
    return max(lost, key=lambda item: item[1]) if lost else None


def compare_with_baseline(metrics: Mapping[str, Any], baseline: Mapping[str, Any],
                          *, where: str) -> dict[str, Any]:
    """This run against a fault-free run of the same workflow (``baseline`` = its report).

    The fault-free run's ETTR is the upper bound on this machine; ``fault_free_wall_s``
    is how long this run's useful steps took there, so ``cost_of_faults_s`` is what the
    faults cost, whatever caused it.
    """
    base = baseline["metrics"]
    fix = "pass the report of the same `resched run` command run without --chaos"
    if base.get("faults"):
        raise UsageError(f"the baseline run had {base['faults']} fault(s); it must be fault-free",
                         where=where, fix=fix)
    if baseline.get("status") != "COMPLETED":
        raise UsageError(f"the baseline run ended {baseline.get('status')}, not COMPLETED",
                         where=where, fix=fix)
    if not base.get("useful_steps") or not base.get("wall_s") or not base.get("ettr"):
        raise UsageError("the baseline run has no training steps to compare with",
                         where=where, fix=fix)
    out: dict[str, Any] = {
        "baseline_run_id": baseline.get("run_id"), "baseline_workflow": baseline.get("workflow"),
        "baseline_wall_s": base["wall_s"], "baseline_steps": base["useful_steps"],
        "baseline_step_s": base.get("step_s"), "ettr_fault_free": base["ettr"],
        "ettr_vs_fault_free": None, "fault_free_wall_s": None, "cost_of_faults_s": None,
    }
    if metrics.get("ettr") is not None:
        out["ettr_vs_fault_free"] = round(metrics["ettr"] / base["ettr"], 4)
    if metrics.get("useful_steps"):
        fault_free = metrics["useful_steps"] * base["wall_s"] / base["useful_steps"]
        out["fault_free_wall_s"] = round(fault_free, 3)
        out["cost_of_faults_s"] = round(metrics["wall_s"] - fault_free, 3)
    return out


def ettr_lines(metrics: Mapping[str, Any], breakdown: Mapping[str, float | None],
               baseline: Mapping[str, Any] | None) -> list[str]:
    """The ETTR block of the text report: measured, fault-free, model, lost time."""
    if metrics.get("ettr") is None:
        return ["ETTR: no training steps were seen: the training printed no progress line resched "
                "reads and no checkpoint step appeared in its checkpoint folder "
                "(see docs/your-training.md)"]
    lines = [(f"ETTR {metrics['ettr']:.2f} = useful {metrics['useful_s']:.1f} s "
             f"({metrics['useful_steps']} steps x {metrics['step_s']:.3f} s) / wall {metrics['wall_s']:.1f} s")]
    sources = metrics.get("progress_source") or []
    if sources and sources != ["resched-train"]:
        lines.append(f"  steps read from: {', '.join(sources)}"
                     + (" (seen at saves only: step time and lost steps are per checkpoint)"
                        if sources == ["checkpoint-folder"] else ""))
    if baseline is not None:
        lines.append(
            f"  fault-free run {baseline['baseline_run_id']}: ETTR {baseline['ettr_fault_free']:.2f} "
            f"(the upper bound here); this run reaches {baseline['ettr_vs_fault_free']:.0%} of it"
            + (f"; the faults cost {baseline['cost_of_faults_s']:.1f} s over "
               f"{baseline['fault_free_wall_s']:.1f} s" if baseline.get("cost_of_faults_s") is not None else ""))
    else:
        lines.append("  fault-free upper bound: not measured (run the same command without --chaos, "
                     "then `resched report RUN_DIR --baseline FAULT_FREE_RUN_DIR`)")
    if metrics.get("ettr_model_optimal") is not None:
        used = (f"{metrics['ettr_model_used']:.2f} at the interval used "
                f"({metrics['checkpoint_interval_s']:.1f} s), "
                if metrics.get("ettr_model_used") is not None else "")
        lines.append(f"  Young/Daly model for MTBF {metrics['mtbf_s']:.1f} s, checkpoint "
                     f"{metrics['checkpoint_cost_s']:.3f} s: {used}{metrics['ettr_model_optimal']:.2f} "
                     f"at the optimal interval ({metrics['tau_opt_s']:.1f} s)")
        if metrics.get("model_in_range") is False:
            lines.append("    (faults are too frequent for this first-order model: MTBF < 10 x "
                         "(interval + detection + restart); read it as a trend, not a prediction)")
    lost = metrics["wall_s"] - (metrics.get("useful_s") or 0.0)
    parts = ", ".join(f"{LOST_PARTS[k][0]} {v:.1f} s" for k, v in breakdown.items()
                      if k in LOST_PARTS and v)
    lines.append(f"  lost {lost:.1f} s: {parts}")
    early = metrics.get("faults_before_first_step") or 0
    if early:
        lines.append(f"  start-up includes the recovery from {early} fault(s) that hit before the first step")
    worst = largest_loss(breakdown)
    if worst is not None:
        lines.append(f"  largest: {LOST_PARTS[worst[0]][0]} ({worst[1]:.1f} s): {LOST_PARTS[worst[0]][1]}")
    return lines
