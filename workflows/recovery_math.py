"""Recovery math: checkpoint intervals (Young, Daly) and the ETTR a failure rate allows.

Pure functions on plain numbers (seconds), no I/O, no imports from the rest of resched:
the run report and the failure simulator both use them, so a number printed by one
means the same in the other.

Model (reference/recovery-math.md; Young 1974, Daly 2006). With a blocking checkpoint
cost delta, a checkpoint every tau seconds of work, a mean time between failures M, a
detection time D and a restart time R (detection -> first new step), the fraction of
wall time wasted is, to first order,

    W(tau) = delta / tau          (checkpoint overhead)
           + tau / (2 M)          (lost work: half an interval per failure on average)
           + (D + R) / M          (recovery per failure)

and ETTR = 1 - W. Young's interval tau* = sqrt(2 delta M) minimises W; Daly's higher
order estimate corrects it when delta is not small against M. The model is first order:
it assumes M >> tau + D + R; when that fails (a demo with a fault every 20 s) it can
predict less than what was measured, so it is a *model*, never an upper bound. The
upper bound on a given machine is the same run without faults (see the run report).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Waste:
    """Where the modelled waste goes, each as a fraction of wall time."""

    interval_s: float
    checkpoint: float
    lost_work: float
    recovery: float

    @property
    def total(self) -> float:
        return self.checkpoint + self.lost_work + self.recovery

    @property
    def ettr(self) -> float:
        """1 - W, floored at 0 (beyond that the first-order model has no meaning)."""
        return max(0.0, 1.0 - self.total)


def _positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _non_negative(name: str, value: float) -> None:
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def young_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimum checkpoint interval: sqrt(2 delta M)."""
    _positive("checkpoint_s", checkpoint_s)
    _positive("mtbf_s", mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (2006); M when the checkpoint costs 2 M or more."""
    _positive("checkpoint_s", checkpoint_s)
    _positive("mtbf_s", mtbf_s)
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = checkpoint_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - checkpoint_s


def waste(interval_s: float, checkpoint_s: float, mtbf_s: float, detection_s: float = 0.0,
          restart_s: float = 0.0) -> Waste:
    """W(tau) split into its three parts (fractions of wall time)."""
    _positive("interval_s", interval_s)
    _non_negative("checkpoint_s", checkpoint_s)
    _positive("mtbf_s", mtbf_s)
    _non_negative("detection_s", detection_s)
    _non_negative("restart_s", restart_s)
    return Waste(interval_s=interval_s, checkpoint=checkpoint_s / interval_s,
                 lost_work=interval_s / (2.0 * mtbf_s),
                 recovery=(detection_s + restart_s) / mtbf_s)


def optimal_waste(checkpoint_s: float, mtbf_s: float, detection_s: float = 0.0,
                  restart_s: float = 0.0) -> Waste:
    """W at Young's interval: sqrt(2 delta / M) + (D + R) / M."""
    return waste(young_interval(checkpoint_s, mtbf_s), checkpoint_s, mtbf_s, detection_s, restart_s)


def ettr(useful_s: float, wall_s: float) -> float:
    """Effective training time ratio: useful new training time / wall time."""
    _non_negative("useful_s", useful_s)
    _positive("wall_s", wall_s)
    return useful_s / wall_s


def mtbf(wall_s: float, failures: int) -> float | None:
    """Observed mean time between failures; None without a failure (M unknown, not infinite)."""
    _positive("wall_s", wall_s)
    return wall_s / failures if failures > 0 else None
