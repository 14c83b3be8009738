"""A training that said it finished but whose processes do not exit.

Seen with torchrun and gloo: every rank printed its last line, the training was over,
and the processes sat in the process-group teardown until a hang detector killed them
minutes later (and the kill read as a failure). The training's own words that it is
done are in :mod:`wrapper.progress_lines` (kind FINISHED, and resched's example's final
checksum); the finished-flag file (``--expect-finished-flag``) says the same. Once one of
them was said and the processes have been quiet for ``--teardown-timeout`` (default
30 s), the wrapper ends them and counts the attempt complete, with the line as evidence.

Megatron prints "after training is done" *before* its final save: there the training
is done only once the next save was reported, or at once when its last iteration had
been saved already (``save_follows`` in the pattern table).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wrapper import progress_lines
from wrapper.progress_lines import ProgressKind

_DONE_KINDS = (ProgressKind.FINISHED, ProgressKind.CHECKSUM)
# A block is looked at only when it holds one of these (the watch runs on every line).
_LITERALS = tuple({p.literal for p in progress_lines.PATTERNS
                   if p.kind in (*_DONE_KINDS, ProgressKind.SAVED)})


@dataclass(frozen=True)
class FinishSeen:
    """What said the training was done, and when (the supervisor's clock)."""

    evidence: str  # the line, or the finished-flag file
    pattern: str  # the pattern id, or "finished-flag"
    at: float


class FinishWatch:
    """Fed the training's output; tells the supervisor once the training said it is done."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 last_step: Callable[[], int | None] = lambda: None,
                 flag: Path | None = None) -> None:
        self.clock, self.last_step, self.flag = clock, last_step, flag
        self.seen: FinishSeen | None = None
        self._pending: FinishSeen | None = None  # said, but its final save is still to come
        self._last_saved: int | None = None

    def feed(self, text: str) -> None:
        if self.seen is not None or not any(literal in text for literal in _LITERALS):
            return
        for segment in progress_lines.segments(text):
            found = progress_lines.match_segment(segment)
            if found is None:
                continue
            if found.kind is ProgressKind.SAVED:
                self._last_saved = found.step
                if self._pending is not None:
                    self.seen = FinishSeen(self._pending.evidence, self._pending.pattern,
                                           self.clock())
                    return
            elif found.kind in _DONE_KINDS:
                said = FinishSeen(segment.strip()[:300], found.pattern.id, self.clock())
                last = self.last_step()
                if found.pattern.save_follows and (last is None or self._last_saved != last):
                    self._pending = said
                else:
                    self.seen = said
                    return

    def finished(self) -> FinishSeen | None:
        """The evidence that the training is done, None while it is not."""
        if self.seen is None and self.flag is not None and self.flag.exists():
            self.seen = FinishSeen(f"finished-flag file {self.flag} exists", "finished-flag",
                                   self.clock())
        return self.seen
