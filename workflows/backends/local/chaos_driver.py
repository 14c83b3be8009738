"""Decide when each chaos fault fires and fire it on the target's current run."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from workflows.backends.local.chaos import ChaosPlan, Fault
from workflows.backends.local.inject import inject
from workflows.backends.local.taskrun import TaskRun
from workflows.backends.local.timeline import Event, Timeline

# A random clock that has seen no training step for this long (or one MTBF, if longer)
# says so and counts run time instead: longer than any start-up (imports, staging).
NO_PROGRESS_S = 60.0

# a new attempt of a task's training: the wrapper's in-place retry or a new pod
_RESTART = ("wrapper_attempt_started", "attempt_restarted")


@dataclass(frozen=True)
class Fired:
    fault: Fault
    task: str
    description: str


class ChaosDriver:
    """Scripted faults fire at their time (or checkpoint count) once the target runs.
    Random faults come after exponential gaps (mean ``mtbf``) of training time: each gap
    starts at the first training step after the previous fault (or the first step of
    the run), so a fault hits a training that runs, and recovery time is not counted
    as time between failures (as an MTBF is measured over uptime).

    A scripted ``Nstep`` fault fires once the training reported that step or a later one
    (the step is the same on every machine, whatever its speed or load, so the fault
    lands at the same point of the training; a time does not).
    A scripted ``Nckpt`` or ``Nstep`` fault never fires while an earlier fault is still being
    recovered (no restart followed by a training step yet): checkpoint uploads go on
    during a recovery (a Megatron-style exit saves once more on its way out, a hung
    peer's partner may still save), so a count alone would stack the next fault onto
    the previous one's recovery and make the sequence a race. Uploads are still
    counted meanwhile: the fault fires as soon as the recovery is over. The recovery is
    over at the first training step after the restart, or at the upload of a newer
    checkpoint step (a training whose steps are seen at its saves only).

    Counted faults (``Nckpt``, ``Nstep``) fire in the order given: one that is due but whose
    target cannot be hit yet (an exit needs the restarted training's ranks) holds the next
    back, so a SIGTERM due at the same moment never overtakes it.

    A fault that cannot fire says so at once (``on_warning``, one line): an ``Nckpt``
    fault in a workflow where no task has a ``checkpoint:`` upload to count; a random clock that waits
    for a first training step the training never shows (after one MTBF of run time, at
    least NO_PROGRESS_S, it counts run time instead, until a step is seen)."""

    def __init__(self, plan: ChaosPlan, task_names: Sequence[str], timeline: Timeline, *,
                 stop_grace_s: float, clock: Callable[[], float] = time.monotonic,
                 checkpointed_tasks: Collection[str] | None = None,
                 on_warning: Callable[[str], None] = lambda line: None) -> None:
        self.plan, self.task_names, self.timeline = plan, tuple(task_names), timeline
        self.stop_grace_s, self.clock, self.on_warning = stop_grace_s, clock, on_warning
        self.notes: list[str] = []
        self.start = clock()
        self.pending: list[Fault] = list(plan.faults)
        self.fired: list[Fired] = []
        self.uploads = 0
        self.max_step = -1  # of the uploads
        self.train_step = -1  # the highest step the training reported
        self.last_step_t = float("-inf")
        self.last_fired_t = float("-inf")
        self._recovering = False  # a fault fired; no restart + step seen since
        self._restarted = False
        self._rng = random.Random(plan.random.seed) if plan.random else None
        self._random_count = 0
        self._next_random: Fault | None = None
        self._awaiting_progress = plan.random is not None
        self._wall_clock_random = False
        timeline.listen(self._on_event)
        # Nckpt counts the run's uploads, whichever task makes them (a worker is slowed
        # after the master's first upload): it can never fire only where no task uploads.
        for fault in plan.faults:
            if (fault.after_ckpt is not None and checkpointed_tasks is not None
                    and not checkpointed_tasks):
                self._warn(f"chaos {fault.describe()} can never fire: no task of this workflow "
                           "has a checkpoint: upload to count (add a checkpoint: entry, or give "
                           "the time instead, e.g. @30s)")

    def _warn(self, line: str) -> None:
        self.notes.append(line)
        self.timeline.add("chaos_warning", None, warning=line)
        self.on_warning(line)

    def _on_event(self, event: Event) -> None:
        step = event.fields.get("step")
        if event.kind == "checkpoint_uploaded" and isinstance(step, int) and step > self.max_step:
            # only uploads of a newer step count: a measure of training progress (the
            # directory also changes when nothing trained, e.g. the wrapper's records)
            self.max_step = step
            self.uploads += 1
            if self._restarted and event.t >= self.last_fired_t:
                self._recovering = self._restarted = False  # progress since the restart
        elif event.kind == "step":
            if isinstance(step, int):
                self.train_step = max(self.train_step, step)
            self.last_step_t = event.t
            self._wall_clock_random = False  # progress is visible: back to training time
            if self._restarted:
                self._recovering = self._restarted = False
        elif event.kind in _RESTART and self._recovering and event.t >= self.last_fired_t:
            self._restarted = True

    def _draw(self, after_s: float) -> Fault | None:
        assert self.plan.random is not None and self._rng is not None
        limit = self.plan.random.max_faults
        if limit is not None and self._random_count >= limit:
            return None
        return self.plan.random.next_fault(self._rng, after_s, self.task_names)

    def _due(self, fault: Fault, elapsed: float) -> bool:
        if fault.at_s is not None:
            return elapsed >= fault.at_s
        if fault.at_step is not None:
            return self.train_step >= fault.at_step and not self._recovering
        return (fault.after_ckpt is not None and self.uploads >= fault.after_ckpt
                and not self._recovering)

    def tick(self, runs: Mapping[str, TaskRun]) -> list[Fired]:
        """Fire every due fault whose target can be hit now."""
        elapsed = self.clock() - self.start
        fired = []
        held = False  # an earlier counted fault is due but its target cannot be hit yet
        for fault in list(self.pending):
            counted = fault.after_ckpt is not None or fault.at_step is not None
            if counted and held:
                continue
            if self._due(fault, elapsed) and self._fire(fault, runs.get(fault.task)):
                self.pending.remove(fault)
                fired.append(self.fired[-1])
            elif counted and self._due(fault, elapsed) and _may_come(runs.get(fault.task)):
                # counted faults are a sequence: the next must not overtake this one
                # (uploads go on during a recovery, so both can be due at once; an exit
                # needs the restarted training's ranks, a SIGTERM only the top process)
                held = True
        random_plan = self.plan.random
        if (random_plan is not None and self._awaiting_progress and not self._wall_clock_random
                and self.last_step_t == float("-inf")
                and elapsed >= max(random_plan.mtbf_s, NO_PROGRESS_S)):
            self._wall_clock_random = True
            self._warn(f"chaos random:mtbf={random_plan.mtbf_s:g}s: no training step seen in "
                       f"{elapsed:.0f} s (the training prints no progress line resched reads "
                       "and its checkpoint folder shows no step), so its clock counts run time "
                       "from now on, recovery included (see docs/your-training.md)")
        if self._awaiting_progress and (self.last_step_t > self.last_fired_t
                                        or self._wall_clock_random):
            # the clock to the next random fault runs while training runs: it starts
            # at the first training step after the previous fault
            self._awaiting_progress = False
            self._next_random = self._draw(elapsed)
        nxt = self._next_random
        if nxt is not None and self._due(nxt, elapsed) and self._fire(nxt, runs.get(nxt.task)):
            self._random_count += 1
            self._next_random, self._awaiting_progress = None, True
            fired.append(self.fired[-1])
        return fired

    def _fire(self, fault: Fault, run: TaskRun | None) -> bool:
        if run is None or run.finished or run.poll() is not None:
            return False
        injection = inject(fault, token=run.token, top_pid=run.pid, exit_dir=run.exit_dir)
        if injection is None:
            return False
        if injection.forced_exit_code is not None:
            run.forced_exit_code = injection.forced_exit_code
        if injection.kill_after_grace:
            run.kill_at = self.clock() + self.stop_grace_s
        event = self.timeline.add(
            "fault_injected", fault.task, fault=fault.kind, spec=fault.describe(),
            detail=injection.description, attempt=run.attempt, pids=list(injection.pids),
            wrapper_bypassed=injection.forced_exit_code is not None,
        )
        self.last_fired_t = event.t
        self._recovering, self._restarted = True, False
        self.fired.append(Fired(fault, fault.task, injection.description))
        return True

    def not_fired(self) -> list[str]:
        left = [f.describe() for f in self.pending]
        return left

    def final_notes(self) -> list[str]:
        """The warnings said during the run, and a random spec that injected nothing."""
        notes = list(self.notes)
        if self.plan.random is not None and self._random_count == 0:
            elapsed = self.clock() - self.start
            notes.append(f"chaos random:mtbf={self.plan.random.mtbf_s:g}s injected no fault in "
                         f"{elapsed:.0f} s: "
                         + ("no training step was ever seen" if self.last_step_t == float("-inf")
                            else "the next fault was drawn for after the run ended")
                         + "; use a shorter mtbf= or a longer run")
        return notes


def _may_come(run: TaskRun | None) -> bool:
    """The target may still be hit: its task has not started yet, or runs (not finished)."""
    return run is None or not run.finished
