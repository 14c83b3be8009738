"""``LoopProgress`` for a plain training loop (optional; never required).

    from wrapper.integrations.loop import LoopProgress
    with LoopProgress(max_steps=1000) as progress:
        for step in range(start + 1, 1001):
            train_one_step()
            progress.step(step)
            if step % 100 == 0 or progress.stop_requested:
                save(step)
                progress.saved(step)
                if progress.stop_requested:
                    break

Per step: heartbeat and ``resched-train: step N``; ``stop_requested`` turns true on
TERM / USR1 (the training saves and leaves instead of dying mid-step); leaving the
``with`` block after ``max_steps`` prints the finish line and writes the finished flag.
"""

from __future__ import annotations

from types import TracebackType

from wrapper.integrations.common import StopRequest, say_finished, say_saved, say_step


class LoopProgress:
    def __init__(self, max_steps: int | None = None) -> None:
        self.max_steps = max_steps
        self.last_step: int | None = None
        self._stop: StopRequest | None = None

    def __enter__(self) -> LoopProgress:
        self._stop = StopRequest()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._stop is not None:
            self._stop.close()
        if (kind is None and self.last_step is not None and self.max_steps is not None
                and self.last_step >= self.max_steps):
            say_finished(self.last_step)

    @property
    def stop_requested(self) -> bool:
        return self._stop is not None and self._stop.requested

    def step(self, step: int) -> None:
        self.last_step = step
        say_step(step)

    def saved(self, step: int) -> None:
        say_saved(step)
