"""Progress from a task's checkpoint folder (workflows.backends.local.ckpt_progress):
what is restored is no save, a save the training announces itself is not counted twice,
and steps come from the folder only for a training that prints none."""

from __future__ import annotations

from pathlib import Path

from workflows.backends.local.ckpt_progress import SOURCE, CheckpointProgress
from workflows.backends.local.timeline import Timeline


class Folder:
    def __init__(self, step: int | None) -> None:
        self.step = step

    def __call__(self, _path: Path) -> int | None:
        return self.step


def _watch(step: int | None, *, restored: int | None = None):
    clock = {"t": 100.0}
    timeline = Timeline(clock=lambda: clock["t"])
    folder = Folder(step)
    watch = CheckpointProgress("train", 1, [Path("/ck")], timeline, restored=restored,
                               step_of=folder)
    watch.last = watch.current() if watch.current() is not None else restored
    return watch, timeline, folder, clock


def _kinds(timeline: Timeline) -> list[tuple[str, int, float]]:
    return [(e.kind, e.fields["step"], e.t) for e in timeline.events if e.fields.get("source") == SOURCE]


def test_a_new_step_is_a_save_and_a_step_stamped_when_seen() -> None:
    watch, timeline, folder, clock = _watch(None, restored=20)
    folder.step = 20  # the staged checkpoint lands: restored, not saved
    watch.poll()
    watch.poll()
    assert _kinds(timeline) == []
    folder.step = 30
    watch.poll()
    clock["t"] = 100.5
    watch.poll()
    assert _kinds(timeline) == [("checkpoint_saved", 30, 100.0), ("step", 30, 100.0)]


def test_the_trainings_own_lines_win() -> None:
    watch, timeline, folder, clock = _watch(10)
    timeline.add("step", "train", attempt=1, step=25)
    folder.step = 30
    watch.poll()  # seen: the save line comes right after the files
    timeline.add("checkpoint_saved", "train", attempt=1, step=30, save_s=0.1)
    watch.poll()
    assert _kinds(timeline) == []
    folder.step = 40
    watch.poll()
    watch.poll()
    assert _kinds(timeline) == []  # it announces its saves: the folder adds none


def test_another_tasks_lines_do_not_count() -> None:
    watch, timeline, folder, _ = _watch(0)
    timeline.add("step", "other", attempt=1, step=5)
    folder.step = 10
    watch.poll()
    watch.stop()
    assert [k for k, _s, _t in _kinds(timeline)] == ["checkpoint_saved", "step"]


def test_step_time_ignores_lines_read_in_one_burst() -> None:
    from workflows.backends.local.report import step_time
    from workflows.backends.local.timeline import Event

    def step(t: float, n: int) -> Event:
        return Event(t=t, kind="step", task="train", fields={"attempt": 1, "step": n})

    # steps every 0.3 s, but steps 4-6 were read together after the reader paused
    events = [step(0.3, 1), step(0.6, 2), step(0.9, 3), step(1.8, 4), step(1.80001, 5),
              step(1.80002, 6), step(2.1, 7), step(2.4, 8)]
    assert abs(step_time(events) - 0.3) < 1e-3  # not the microseconds inside the burst
    rounded = [Event(t=round(e.t, 4), kind=e.kind, task=e.task, fields=e.fields) for e in events]
    assert abs(step_time(rounded) - step_time(events)) < 1e-3  # the report read back agrees
