"""``resched simulate``: resched's real decision code against months of failures at scale.

``run(SimConfig)`` returns the JSON-ready result of one simulated job; ``sweep`` runs the
grids the plot shows. The failure model and the mechanics are in ``failures`` and
``engine``, the policies (resched's own and the baselines) in ``policies``; the analytic
optimum comes from ``workflows.recovery_math`` (one home for the formulas).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from workflows import recovery_math
from workflows.simulate.engine import Mechanics, simulate
from workflows.simulate.failures import (
    KINDS,
    Detection,
    FailureModel,
    TracedFailure,
    llama3_mix,
    llama3_rate_per_gpu_s,
)
from workflows.simulate.policies import POLICIES, make_policy

__all__ = ["POLICIES", "SimConfig", "expected_recovery_s", "run", "young_daly"]


@dataclass(frozen=True)
class SimConfig:
    gpus: int
    gpus_per_node: int = 8
    days: float = 30.0
    seed: int = 0
    policy: str = "resched"
    checkpoint_interval_s: float | None = None  # None: Young's interval for this job
    mechanics: Mechanics = field(  # the interval is filled in by run()
        default_factory=lambda: Mechanics(checkpoint_interval_s=0.0))
    model: FailureModel = field(default_factory=lambda: FailureModel(
        rate_per_gpu_s=llama3_rate_per_gpu_s(), mix=tuple(sorted(llama3_mix().items()))))
    trace: tuple[TracedFailure, ...] | None = None

    @property
    def mtbf_s(self) -> float:
        """The job's expected mean time between failures (all its GPUs together)."""
        rate = self.model.rate_per_gpu_s * self.gpus
        return 1.0 / rate if rate > 0 else math.inf


def expected_recovery_s(config: SimConfig, hang_detection: str = "resched") -> tuple[float, float]:
    """(D, R) for the model: detection averaged over the failure mix, in-place restart."""
    mech = config.mechanics
    mix = dict(config.model.mix)
    total = sum(mix.values()) or 1.0
    detect = sum(share * mech.detection_s(KINDS[name], hang_detection)
                 for name, share in mix.items()) / total
    return detect, mech.restart_cost_s


def young_daly(config: SimConfig, interval_s: float | None = None) -> dict[str, float | None]:
    """The first-order analytic ETTR at the used interval and at Young's optimum."""
    mtbf, blocking = config.mtbf_s, config.mechanics.blocking_s
    if not math.isfinite(mtbf) or blocking <= 0:
        ettr_used = 1.0 - (blocking / interval_s if interval_s else 0.0)
        return {"mtbf_s": None, "young_interval_s": None, "ettr_at_interval": ettr_used,
                "ettr_optimal": None}
    detect, restart = expected_recovery_s(config)
    optimal = recovery_math.optimal_waste(blocking, mtbf, detect, restart)
    # Young's tau is the training between two saves; our interval also holds the save
    used = (recovery_math.waste(interval_s - blocking, blocking, mtbf, detect, restart)
            if interval_s and interval_s > blocking else optimal)
    return {"mtbf_s": mtbf, "young_interval_s": recovery_math.young_interval(blocking, mtbf),
            "ettr_at_interval": used.ettr, "ettr_optimal": optimal.ettr}


def _interval(config: SimConfig) -> float:
    if config.checkpoint_interval_s is not None:
        return config.checkpoint_interval_s
    blocking = config.mechanics.blocking_s
    if blocking <= 0 or not math.isfinite(config.mtbf_s):
        return 3600.0
    # Young's tau* is the training time between saves; our interval includes the save
    return recovery_math.young_interval(blocking, config.mtbf_s) + blocking


def run(config: SimConfig) -> dict[str, Any]:
    interval = _interval(config)
    mechanics = replace(config.mechanics, checkpoint_interval_s=interval)
    policy = make_policy(config.policy)
    outcome = simulate(policy, mechanics, config.model, gpus=config.gpus,
                       gpus_per_node=config.gpus_per_node, duration_s=config.days * 86400.0,
                       seed=config.seed, trace=config.trace)
    analytic = young_daly(config, interval)
    optimum = analytic["ettr_optimal"]
    return {
        "policy": config.policy,
        "gpus": config.gpus,
        "days": config.days,
        "seed": config.seed,
        "ettr": round(outcome.ettr, 5),
        "young_daly_ettr": round(optimum, 5) if optimum is not None else None,
        "young_daly_ratio": round(outcome.ettr / optimum, 4) if optimum else None,
        "model_ettr_at_interval": round(analytic["ettr_at_interval"], 5)
        if analytic["ettr_at_interval"] is not None else None,
        "checkpoint_interval_s": round(interval, 3),
        "checkpoint_blocking_s": mechanics.blocking_s,
        "mtbf_s": round(config.mtbf_s, 1) if math.isfinite(config.mtbf_s) else None,
        "interruptions": outcome.interruptions,
        "interruptions_by_kind": outcome.by_kind,
        "lost_time_s": outcome.lost.as_dict(),
        "failed": outcome.failed,
        "manual_interventions": outcome.manual_interventions,
        "excluded_nodes": outcome.excluded_nodes,
        "recommendation": _recommend(config, outcome.max_failures_between_checkpoints),
    }


def _recommend(config: SimConfig, max_between: int) -> dict[str, Any]:
    """Young's interval for this job, and budgets that outlast the worst burst seen.

    Budgets reset when the checkpoint advances, so they must cover the most failures
    that arrived between two durable checkpoints (plus one for margin)."""
    blocking = config.mechanics.blocking_s
    interval = (recovery_math.young_interval(blocking, config.mtbf_s) + blocking
                if blocking > 0 and math.isfinite(config.mtbf_s) else None)
    return {"checkpoint_interval_s": round(interval, 1) if interval else None,
            "max_retries": max(3, max_between + 1),
            "max_reschedules": max(2, max_between + 1)}


def hang_kinds() -> list[str]:
    return [name for name, kind in KINDS.items() if kind.detection is Detection.HANG]
