"""From the timeline to the numbers: per-fault recovery, ETTR and the Young/Daly model.

Per injected fault (recovery-math.md): t_fault -> t_detect (first failure seen by a
wrapper or the executor) -> decision -> restart -> checkpoint restored -> first new
step -> caught up (back at the step reached before the fault). Detection latency
D = t_detect - t_fault, time to resume R = t_first_new_step - t_detect, lost steps =
step before the fault - restored step.

ETTR = useful training time / wall time, with useful time = new steps of the final
model x the median step time, all read from the task that made the final model. The
Young/Daly figures (:mod:`workflows.recovery_math`) are what the first-order model
predicts for the measured MTBF (wall / faults), checkpoint cost delta (the training's
``save_s``), D and R, at the checkpoint interval the run used and at Young's optimum.
They are a model, not an upper bound: the upper bound on this machine is the same run
without faults, compared in :mod:`workflows.backends.local.ettr`.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from typing import Any

from workflows import recovery_math
from workflows.backends.local.timeline import Event
from workflows.recovery_math import ettr

_DETECT = ("wrapper_failure_detected", "failure_detected")
_DECIDE = ("wrapper_decision", "decision")
_RESTART = ("wrapper_attempt_started", "attempt_restarted")
_RESTORE = ("wrapper_checkpoint_restored", "training_resumed")
_SAVED = ("checkpoint_saved", "checkpoint_uploaded")


def _first(events: Sequence[Event], kinds: tuple[str, ...], after: float) -> Event | None:
    return next((e for e in events if e.kind in kinds and e.t >= after), None)


def fault_metrics(events: Sequence[Event]) -> list[dict[str, Any]]:
    steps = [e for e in events if e.kind == "step"]
    out = []
    injected = [e for e in events if e.kind == "fault_injected"]
    for index, fault in enumerate(injected):
        item: dict[str, Any] = {"task": fault.task, "spec": fault.fields.get("spec"),
                                "detail": fault.fields.get("detail"), "t_fault": fault.t}
        next_fault = injected[index + 1].t if index + 1 < len(injected) else math.inf
        # A checkpoint saved or uploaded before the fault proves its step was reached,
        # whatever the step lines say: an @Nckpt fault fires on the upload itself, which
        # can see a save before the folder watcher's next look stamps its step.
        before = [e.fields["step"] for e in events
                  if e.t <= fault.t and isinstance(e.fields.get("step"), int)
                  and (e.kind == "step" or (e.kind in _SAVED and e.task == fault.task))]
        item["step_before"] = max(before) if before else None
        detect = _first(events, _DETECT, fault.t)
        decide = _first(events, _DECIDE, detect.t) if detect else None
        restart = _first(events, _RESTART, decide.t) if decide else None
        restore = _first(events, _RESTORE, restart.t) if restart else None
        anchor = restore or restart
        first_new = next((s for s in steps if anchor and s.t >= anchor.t), None)
        for name, event in (("t_detect", detect), ("t_decision", decide), ("t_restart", restart),
                            ("t_restored", restore), ("t_first_new_step", first_new)):
            item[name] = event.t if event else None
        if decide is not None:
            item["decision"] = decide.fields.get("decision") or decide.fields.get("action")
            item["rule"] = decide.fields.get("rule")
        restored_step = _restored_step(restore, first_new)
        item["restored_step"] = restored_step
        # A fault injected before this one's recovery finished takes the rest of the
        # window: what follows is not this fault's (the overlap is reported, not summed).
        item["interrupted"] = first_new is None or first_new.t > next_fault
        if detect is not None and detect.t > next_fault:
            detect = None
        item["detection_s"] = _delta(fault, detect)
        item["resume_s"] = None if item["interrupted"] else _delta(detect, first_new)
        if item["step_before"] is not None and restored_step is not None and not item["interrupted"]:
            item["lost_steps"] = max(0, item["step_before"] - restored_step)
            caught = next((s for s in steps if first_new and s.t >= first_new.t
                           and s.fields["step"] >= item["step_before"]), None)
            item["t_caught_up"] = caught.t if caught else None
        out.append(item)
    return out


def _restored_step(restore: Event | None, first_new: Event | None) -> int | None:
    if restore is not None and restore.fields.get("step") is not None:
        return int(restore.fields["step"])
    return int(first_new.fields["step"]) - 1 if first_new is not None else None


def _delta(start: Event | None, end: Event | None) -> float | None:
    return round(end.t - start.t, 3) if start is not None and end is not None else None


def _mean(values: Sequence[float | None]) -> float | None:
    real = [v for v in values if v is not None]
    return round(statistics.fmean(real), 3) if real else None


def reference_task(events: Sequence[Event]) -> str | None:
    """The task whose steps make the final model: the one that printed the last step.

    Every number of the run (step time, useful time, checkpoint cost and interval) is
    read from this one task, so parallel tasks never count the same wall time twice.
    """
    last = next((e for e in reversed(events) if e.kind == "step"), None)
    return last.task if last is not None else None


def checkpoint_interval(events: Sequence[Event], task: str | None) -> float | None:
    """Median time between two checkpoints of one attempt (saves, else uploads)."""
    for kind in ("checkpoint_saved", "checkpoint_uploaded"):
        marks = [e for e in events if e.kind == kind and e.task == task]
        gaps = [b.t - a.t for a, b in itertools.pairwise(marks)
                if b.fields.get("attempt") == a.fields.get("attempt") and b.t > a.t]
        if gaps:
            return statistics.median(gaps)
    return None


BURST_S = 0.002  # step lines closer than this were read together, not stepped apart


def step_time(steps: Sequence[Event]) -> float | None:
    """Median seconds per step. From consecutive step lines when the training prints every
    step; else per step over the gaps it shows (a progress bar redraws at most every
    0.1 s, a training seen only at its saves shows one step per checkpoint)."""
    # Lines read in one chunk (a progress bar's redraws after a pause of the reader) carry
    # the time they were read, microseconds apart: only the last of such a burst keeps
    # its time (and the report read back, whose times are rounded, agrees).
    steps = [e for e, after in itertools.zip_longest(steps, steps[1:])
             if after is None or after.t - e.t > BURST_S]
    pairs = [(a, b) for a, b in itertools.pairwise(steps)
             if a.fields.get("attempt") == b.fields.get("attempt") and b.t > a.t]
    gaps = [b.t - a.t for a, b in pairs if b.fields["step"] == a.fields["step"] + 1]
    if not gaps:
        gaps = [(b.t - a.t) / (b.fields["step"] - a.fields["step"]) for a, b in pairs
                if b.fields["step"] > a.fields["step"]]
    return statistics.median(gaps) if gaps else None


def progress_sources(events: Sequence[Event], task: str | None) -> list[str]:
    """Where the steps of ``task`` were read: a pattern id, ``checkpoint-folder``, or
    ``resched-train`` (the example's own lines)."""
    found = {e.fields.get("source") or "resched-train" for e in events
             if e.kind == "step" and e.task == task}
    return sorted(found)


def run_metrics(events: Sequence[Event], faults: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    task = reference_task(events)
    steps = [e for e in events if e.kind == "step" and e.task == task]
    step_s = step_time(steps)
    saves = [e.fields["save_s"] for e in events
             if e.kind == "checkpoint_saved" and "save_s" in e.fields and e.task == task]
    uploads = [e.fields["seconds"] for e in events if e.kind == "checkpoint_uploaded"]
    delta = statistics.median(saves) if saves else (statistics.median(uploads) if uploads else None)
    first_step = min((s.fields["step"] for s in steps), default=None)
    final_step = steps[-1].fields["step"] if steps else None
    useful_steps = final_step - max(0, first_step - 1) if final_step is not None \
        and first_step is not None else None
    useful = useful_steps * step_s if step_s and useful_steps is not None else None
    detect, resume = _mean([f["detection_s"] for f in faults]), _mean([f["resume_s"] for f in faults])
    started = next((e.t for e in events if e.kind == "run_started"), None)
    # a step line marks the END of its step: the first step's own compute is not start-up
    startup = max(0.0, steps[0].t - (step_s or 0.0) - started) if started is not None and steps else None
    metrics: dict[str, Any] = {
        "wall_s": round(wall_s, 3), "faults": len(faults), "steps": final_step,
        "reference_task": task, "useful_steps": useful_steps,
        "step_s": _round(step_s), "useful_s": _round(useful), "startup_s": _round(startup),
        "ettr": _round(ettr(useful, wall_s)) if useful and wall_s > 0 else None,
        "checkpoint_cost_s": _round(delta), "checkpoint_cost_source": "save_s" if saves else "upload",
        "checkpoint_interval_s": _round(checkpoint_interval(events, task)),
        "checkpoints_saved": len(saves), "checkpoint_uploads": len(uploads),
        "detection_s": detect, "resume_s": resume,
        "lost_steps": sum(f.get("lost_steps") or 0 for f in faults),
        "first_step_t": steps[0].t if steps else None,
        "faults_before_first_step": sum(1 for f in faults if steps and f["t_fault"] < steps[0].t),
        "progress_source": progress_sources(events, task),
    }
    metrics.update(young_daly(delta, wall_s, len(faults), detect, resume,
                              interval_s=metrics["checkpoint_interval_s"], startup_s=startup))
    return metrics


# The Young/Daly figures are read as predictions only when MTBF >= this x (interval + D + R).
MODEL_RANGE = 10.0


def young_daly(delta: float | None, wall_s: float, faults: int, detect: float | None,
               resume: float | None, *, interval_s: float | None = None,
               startup_s: float | None = None) -> dict[str, Any]:
    """What the Young/Daly model predicts for this run's MTBF: a model, not a bound.

    ``ettr_model_used`` uses the checkpoint interval the run had, ``ettr_model_optimal``
    Young's tau* = sqrt(2 delta M); both with the measured D and R, and both scaled by
    the share of the wall time after start-up (the model knows no start-up), so they
    compare with the measured ETTR. The upper bound is a fault-free run (``--baseline``).
    """
    out: dict[str, Any] = {"mtbf_s": None, "tau_opt_s": None, "tau_daly_s": None, "model_in_range": None,
                           "ettr_model_used": None, "ettr_model_optimal": None,
                           "waste_model_used": None, "waste_model_optimal": None}
    if not faults or not delta or wall_s <= 0:
        return out
    m = wall_s / faults
    steady = max(0.0, wall_s - (startup_s or 0.0)) / wall_s
    d, r = detect or 0.0, resume or 0.0
    best = recovery_math.optimal_waste(delta, m, d, r)
    out.update(mtbf_s=round(m, 3), tau_opt_s=round(best.interval_s, 3),
               tau_daly_s=round(recovery_math.daly_interval(delta, m), 3),
               ettr_model_optimal=round(best.ettr * steady, 4), waste_model_optimal=_parts(best))
    # first order means failures are rare against an interval plus a recovery
    out["model_in_range"] = m >= MODEL_RANGE * ((interval_s or best.interval_s) + d + r)
    if interval_s:
        used = recovery_math.waste(interval_s, delta, m, d, r)
        out.update(ettr_model_used=round(used.ettr * steady, 4), waste_model_used=_parts(used))
    return out


def _parts(waste: recovery_math.Waste) -> dict[str, float]:
    return {"interval_s": round(waste.interval_s, 3), "checkpoint": round(waste.checkpoint, 4),
            "lost_work": round(waste.lost_work, 4), "recovery": round(waste.recovery, 4)}


def _round(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


def duration_text(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, rest = divmod(seconds, 60)
    return f"{minutes}m{rest:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m{rest:02d}s"


def summary_line(status: str, metrics: dict[str, Any]) -> str:
    """``COMPLETED in 1m05s: 3 faults, detection 0.5 s, resume 4.2 s, ETTR 0.65 (model 0.70, ...)``.

    The model figures are Young/Daly predictions for the measured MTBF, named as such:
    the measured ETTR may exceed them (the model is first order), so never "bound".
    """
    faults = metrics["faults"]
    parts = [f"{faults} fault" + ("" if faults == 1 else "s")]
    if metrics.get("detection_s") is not None:
        parts.append(f"detection {metrics['detection_s']:.1f} s")
    if metrics.get("resume_s") is not None:
        parts.append(f"resume {metrics['resume_s']:.1f} s")
    if metrics.get("ettr") is not None:
        model = []
        if metrics.get("ettr_model_used") is not None:
            model.append(f"{metrics['ettr_model_used']:.2f} at ckpt every "
                         f"{metrics['checkpoint_interval_s']:.1f} s")
        if metrics.get("ettr_model_optimal") is not None:
            model.append(f"{metrics['ettr_model_optimal']:.2f} at optimum {metrics['tau_opt_s']:.1f} s")
        parts.append(f"ETTR {metrics['ettr']:.2f}"
                     + (f" (Young/Daly model {', '.join(model)})" if model else ""))
    return f"{status} in {duration_text(metrics['wall_s'])}: " + ", ".join(parts)
