"""Stop signals that save: which signal the training gets, and whether a stop saved.

A stop (preemption, Slurm's grace signal, a time limit) is only free when the training
wrote a checkpoint newer than the one it started from. Otherwise the steps trained
since that checkpoint are gone, and the record must say so ("stopped, N steps lost")
instead of passing for a clean preemption.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from wrapper.errors import ReschedError

# Progress lines of the trainings resched knows: its example (``resched-train: step N``),
# Megatron (`` iteration      120/  1000 |``), Lightning / HF / plain loops (``step=N``,
# ``global_step N``). The largest number seen is the training's last step.
_STEP_PATTERNS = (
    re.compile(r"\biteration\s+(\d+)\s*/\s*\d+"),
    re.compile(r"\b(?:global_)?step[\s=:]+(\d+)\b", re.IGNORECASE),
)
_SIGNAL_NAMES = {s.name: s for s in signal.Signals}


class StopSignalError(ReschedError):
    """``--stop-signal`` names no signal the training could handle."""


def parse_stop_signal(text: str | int, where: str = "--stop-signal") -> signal.Signals:
    """``TERM``, ``SIGUSR1``, ``usr1`` or ``15`` -> the signal; KILL/STOP are refused
    (a training cannot save on them, which is the point of a stop signal)."""
    raw = str(text).strip()
    if raw.isdigit():
        try:
            sig = signal.Signals(int(raw))
        except ValueError:
            sig = None
    else:
        name = raw.upper()
        sig = _SIGNAL_NAMES.get(name if name.startswith("SIG") else f"SIG{name}")
    if sig is None or sig in (signal.SIGKILL, signal.SIGSTOP):
        raise StopSignalError(
            f"{raw!r} is not a signal a training can catch", where=where,
            fix="use TERM (Megatron, NeMo, torchrun), USR1 (Lightning's SLURM requeue) or INT",
        )
    return sig


class StepTracker:
    """The last training step printed, from the log lines the wrapper forwards."""

    def __init__(self) -> None:
        self.last_step: int | None = None

    def feed(self, text: str) -> None:
        for pattern in _STEP_PATTERNS:
            for match in pattern.finditer(text):
                step = int(match.group(1))
                if self.last_step is None or step > self.last_step:
                    self.last_step = step


@dataclass(frozen=True)
class StopVerdict:
    """How a stopped attempt left its work: ``saved`` or how many steps were lost."""

    saved: bool | None  # None: the wrapper does not know the checkpoint dir
    steps_lost: int | None
    summary: str


def judge_stop(*, step_before: int | None, step_after: int | None,
               last_step: int | None, checkpoint_known: bool) -> StopVerdict:
    """Did the stop leave a checkpoint newer than the one the attempt started from?"""
    if not checkpoint_known:
        return StopVerdict(None, None, "stopped; checkpoint not watched (pass --checkpoint-dir)")
    newer = step_after is not None and (step_before is None or step_after > step_before)
    base = step_after if step_after is not None else 0
    lost = None if last_step is None else max(0, last_step - base)
    if newer and not lost:
        return StopVerdict(True, 0, f"stopped and saved at step {step_after}")
    if newer:
        return StopVerdict(True, lost, f"stopped, saved at step {step_after}, {lost} steps lost")
    lost_text = "an unknown number of" if lost is None else str(lost)
    return StopVerdict(False, lost, f"stopped, {lost_text} steps lost (no newer checkpoint "
                                    f"than step {step_before if step_before is not None else 'none'})")
