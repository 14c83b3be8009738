"""Progress read from a task's checkpoint folders, for trainings that print none.

A Lightning training (whose progress bar prints nothing line by line when stdout is not
a terminal) or a DCP loop says nothing resched can read, but every save leaves the
framework's own files: ``epoch=E-step=N.ckpt`` / ``last.ckpt``, ``checkpoint-N/``,
``iter_N/`` + tracker, ``global_stepN/`` + ``latest``, a DCP folder's ``.metadata``.
The step a framework would resume from (:func:`wrapper.checkpoint.snapshot.checkpoint_step`,
the same verdict uploads use) growing is a save, and the training reached that step.

Events it adds (``source="checkpoint-folder"``), only where the training's own lines
do not say it: ``checkpoint_saved`` for a newer step when the training prints no save
lines, and ``step`` when it prints no step lines (then steps are seen at saves only).
A step is announced one look after it appeared, stamped with the time it was seen, so
a save line that follows its files closely is never counted twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from workflows.backends.local.timeline import Event, Timeline
from wrapper.checkpoint.snapshot import checkpoint_step

SOURCE = "checkpoint-folder"
POLL_S = 0.5


class CheckpointProgress:
    """Watches the checkpoint folders of one run of a task."""

    def __init__(self, task: str, attempt: int, folders: Sequence[Path], timeline: Timeline, *,
                 restored: int | None = None, poll_s: float = POLL_S,
                 step_of: Callable[[Path], int | None] = checkpoint_step) -> None:
        self.task, self.attempt, self.folders = task, attempt, tuple(folders)
        self.timeline, self.poll_s, self.step_of = timeline, poll_s, step_of
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._said_saved: set[int] = set()  # steps the training's lines called saved
        self._step_lines = False  # the training prints its own step lines
        self._saves_said = False  # ... and its own save lines: the folder adds none
        self._pending: tuple[int, float] | None = None  # seen, announced on the next look
        # a step restored into the folder (inputs staged for this pod, the wrapper's
        # restore) is no save of this run, whenever the copy lands
        self.last: int | None = restored
        self._thread = threading.Thread(target=self._loop, name=f"ckpt-progress-{task}",
                                        daemon=True)
        timeline.listen(self._on_event)

    def start(self) -> None:
        now = self.current()  # what is there already is not a save of this run
        if now is not None and (self.last is None or now > self.last):
            self.last = now
        self._thread.start()

    def current(self) -> int | None:
        steps = [s for s in (self.step_of(f) for f in self.folders) if s is not None]
        return max(steps) if steps else None

    def _on_event(self, event: Event) -> None:
        if event.task != self.task or event.fields.get("source") == SOURCE:
            return
        restored = event.fields.get("step")
        if event.kind == "wrapper_checkpoint_restored" and isinstance(restored, int):
            with self._lock:
                self.last = max(self.last or 0, restored)
            return
        with self._lock:
            if event.kind == "step":
                self._step_lines = True
            elif event.kind == "checkpoint_saved" and isinstance(event.fields.get("step"), int):
                self._said_saved.add(event.fields["step"])
                self._saves_said = True

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def poll(self) -> None:
        """One look. A new step is announced one look later (stamped when it was seen),
        unless the training's own line said it meanwhile: no save is counted twice."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self._announce(*pending)
        step = self.current()
        with self._lock:
            if step is None or (self.last is not None and step <= self.last):
                return
            self.last = step
            self._pending = (step, self.timeline.clock())

    def stop(self) -> None:
        """Stop polling after one last look (a save right before the exit counts)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.poll()
        self.poll()  # announce what the last look found

    def _announce(self, step: int, seen_at: float) -> None:
        with self._lock:
            said = step in self._said_saved or self._saves_said
            lines = self._step_lines
        if not said:
            self.timeline.add("checkpoint_saved", self.task, t=seen_at, attempt=self.attempt,
                              step=step, source=SOURCE)
        if not lines:
            self.timeline.add("step", self.task, t=seen_at, attempt=self.attempt, step=step,
                              source=SOURCE)
