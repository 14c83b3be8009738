"""Exit-code facts the rules compare against, as data (failure-taxonomy.md, OSMO section 5)."""

from __future__ import annotations

import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from workflows.spec import CodeRange

Interval = tuple[int, int]

MAX_PROCESS_CODE = 255
SIGNAL_CODES: Interval = (129, 192)  # 128 + N for N in 1..64

# OSMO's own codes (never a process's): 256-257 init, 2002-2040 runtime, 3000-3006, 4000.
OSMO_CODES: tuple[tuple[int, int, str], ...] = (
    (256, 257, "init failure"),
    (2002, 2040, "runtime failure (2010 download, 2012 upload)"),
    (3000, 3003, "upstream / backend / server / start error"),
    (3004, 3004, "evicted"),
    (3005, 3005, "start timeout"),
    (3006, 3006, "preempted"),
    (4000, 4000, "unknown"),
)

@dataclass(frozen=True)
class Collision:
    """Why a code is risky under RESCHEDULE, how risky, and what to do instead."""

    severity: Literal["error", "warning", "info"]
    why: str
    fix: str


RESCHEDULE_COLLISIONS: dict[int, Collision] = {
    0: Collision(
        severity="error",
        why="0 is success: a finished task would be rescheduled and run again",
        fix="remove 0 from RESCHEDULE",
    ),
    1: Collision(
        severity="warning",
        why="1 is what Python, torchrun and ft_launcher exit with for ANY failure, code bugs "
        "included, so every crash would be rescheduled until the pool's retry limit",
        fix="reschedule on a dedicated code: `resched wrap --reschedule-code 3` exits 3 only "
        "when moving the task can help",
    ),
    16: Collision(
        severity="info",
        why="16 is Megatron's EXIT_CODE_RESUME_TO_DISAMBIGUATE: it does want a reschedule, but "
        "to a DIFFERENT node (OSMO may place the task on the same one) and torchrun / "
        "ft_launcher report it as 1, so the task rarely exits 16 itself",
        fix="run the launcher under `resched wrap`, which recovers the worker's 16 and exits "
        "with the reschedule code, and list that code instead",
    ),
    17: Collision(
        severity="warning",
        why="17 is Megatron's EXIT_CODE_FAILED_ON_RESULT_VALIDATION: one of its three outcomes "
        "(a reproducible result) must abort, and a reschedule only burns GPU hours",
        fix="remove 17 and let `resched wrap` tell the outcomes apart (it reads the tracker "
        "file and the log) and exit with the reschedule code only when it helps",
    ),
    93: Collision(
        severity="warning",
        why="93 is NVRx ft_launcher's no-restart code: it already decided that restarting "
        "cannot help (no progress, or its attribution said stop)",
        fix="move 93 under FAIL",
    ),
}

# Signal exits that are deliberate reschedule triggers, with the ambiguity to explain.
SIGNAL_NOTES: dict[int, str] = {
    137: "137 (SIGKILL): that is OSMO's documented hang workaround (`kill -9` the task), but "
    "the Linux OOM killer and other kills also exit 137, so a host-memory OOM is rescheduled too",
    143: "143 (SIGTERM): a preemption or time-limit stop; rescheduling is right only if the "
    "training saves a checkpoint on SIGTERM",
}


def signal_name(code: int) -> str:
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return f"signal {code - 128}"


def osmo_code_meaning(code: int) -> str | None:
    for low, high, meaning in OSMO_CODES:
        if low <= code <= high:
            return meaning
    return None


def intervals(ranges: Iterable[CodeRange]) -> list[Interval]:
    return merge([(r.low, r.high) for r in ranges])


def merge(items: Iterable[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for low, high in sorted(items):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    out = [(max(x0, y0), min(x1, y1)) for x0, x1 in a for y0, y1 in b if max(x0, y0) <= min(x1, y1)]
    return merge(out)


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for low, high in a:
        pieces = [(low, high)]
        for b0, b1 in b:
            pieces = [
                piece
                for p0, p1 in pieces
                for piece in ((p0, min(p1, b0 - 1)), (max(p0, b1 + 1), p1))
                if piece[0] <= piece[1]
            ]
        out.extend(pieces)
    return merge(out)


def contains(items: Sequence[Interval], code: int) -> bool:
    return any(low <= code <= high for low, high in items)


def format_intervals(items: Sequence[Interval]) -> str:
    """OSMO's code-list syntax: ``3-5,7``."""
    return ",".join(f"{low}" if low == high else f"{low}-{high}" for low, high in items)
