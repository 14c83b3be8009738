"""The chaos driver's schedule: when a scripted ``Nckpt`` fault fires relative to the
uploads and to the previous fault's recovery (no processes: injection is replaced)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from workflows.backends.local import chaos_driver
from workflows.backends.local.chaos import parse_chaos
from workflows.backends.local.chaos_driver import ChaosDriver
from workflows.backends.local.inject import Injection
from workflows.backends.local.timeline import Timeline

TASKS = ["master", "worker_1"]


@dataclass
class FakeRun:
    """What the driver reads of a task run; injection itself is replaced below."""

    token: str = "t"
    pid: int = 1
    exit_dir: Path | None = None
    attempt: int = 0
    finished: bool = False
    forced_exit_code: int | None = None
    kill_at: float | None = None

    def poll(self) -> int | None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> tuple[ChaosDriver, Timeline, Clock]:
    monkeypatch.setattr(chaos_driver, "inject",
                        lambda fault, **_: Injection(f"{fault.kind} injected", (1,)))
    clock = Clock()
    timeline = Timeline(clock=clock)
    plan = parse_chaos("exit:master=16@3ckpt,term:master@4ckpt", TASKS)
    return ChaosDriver(plan, TASKS, timeline, stop_grace_s=5, clock=clock), timeline, clock


def _upload(timeline: Timeline, clock: Clock, step: int) -> None:
    clock.now += 1
    timeline.add("checkpoint_uploaded", "master", step=step, seconds=0.1)


def test_next_ckpt_fault_waits_for_the_previous_recovery(driver) -> None:  # type: ignore[no-untyped-def]
    chaos, timeline, clock = driver
    runs = {"master": FakeRun(), "worker_1": FakeRun()}
    for step in (10, 20, 30):
        _upload(timeline, clock, step)
    assert [f.fault.kind for f in chaos.tick(runs)] == ["exit"]
    # the exiting rank's last save is uploaded before anyone saw the exit: it counts as
    # the 4th upload, but the SIGTERM must not land on a recovery still under way
    _upload(timeline, clock, 33)
    assert chaos.tick(runs) == []
    clock.now += 1
    timeline.add("step", "master", step=34)  # a straggling line of the dying attempt
    assert chaos.tick(runs) == []
    clock.now += 1
    timeline.add("attempt_restarted", "master", mode="reschedule")
    assert chaos.tick(runs) == []  # restarted, not yet training
    clock.now += 1
    timeline.add("step", "master", step=34)
    assert [f.fault.kind for f in chaos.tick(runs)] == ["term"]


def test_uploads_of_no_newer_step_do_not_count(driver) -> None:  # type: ignore[no-untyped-def]
    chaos, timeline, clock = driver
    runs = {"master": FakeRun(), "worker_1": FakeRun()}
    for step in (10, 10, 20, 20):
        _upload(timeline, clock, step)
    assert chaos.tick(runs) == []
    _upload(timeline, clock, 30)
    assert [f.fault.kind for f in chaos.tick(runs)] == ["exit"]


def test_a_step_fault_fires_at_its_step_whatever_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chaos_driver, "inject",
                        lambda fault, **_: Injection(f"{fault.kind} injected", (1,)))
    clock = Clock()
    timeline = Timeline(clock=clock)
    chaos = ChaosDriver(parse_chaos("slow:worker_1=8@300step,kill:master@400step", TASKS), TASKS,
                        timeline, stop_grace_s=5, clock=clock)
    runs = {"master": FakeRun(), "worker_1": FakeRun()}
    clock.now = 1000.0  # a slow start-up or late uploads change nothing: only steps count
    _upload(timeline, clock, 290)
    assert chaos.tick(runs) == []
    timeline.add("step", "master", step=299)
    assert chaos.tick(runs) == []
    timeline.add("step", "master", step=305)  # lines read in bursts: at or after the step
    assert [f.fault.describe() for f in chaos.tick(runs)] == ["slow:worker_1=8@300step"]
    # the next one waits for the slow fault's recovery, like an Nckpt fault
    timeline.add("step", "master", step=450)
    assert chaos.tick(runs) == []
    clock.now += 1
    timeline.add("attempt_restarted", "worker_1", mode="new pod")
    clock.now += 1
    timeline.add("step", "master", step=306)  # resumed below 400: the highest step seen counts
    assert [f.fault.describe() for f in chaos.tick(runs)] == ["kill:master@400step"]


def test_counted_faults_fire_in_their_order_when_both_are_due(monkeypatch: pytest.MonkeyPatch) -> None:
    # Seen in a full run: after the hang's recovery the 3rd and 4th uploads had both
    # come; the exit found no training ranks yet in the restarted task (injection: None,
    # try again) while the SIGTERM, which needs only the top process, fired first.
    ranks_up = [False]
    monkeypatch.setattr(chaos_driver, "inject", lambda fault, **_: (
        None if fault.kind == "exit" and not ranks_up[0] else Injection(f"{fault.kind} injected", (1,))))
    clock = Clock()
    timeline = Timeline(clock=clock)
    plan = parse_chaos("exit:master=16@3ckpt,term:master@4ckpt", TASKS)
    chaos = ChaosDriver(plan, TASKS, timeline, stop_grace_s=5, clock=clock)
    runs = {"master": FakeRun(), "worker_1": FakeRun()}
    for step in (10, 20, 30, 40):
        _upload(timeline, clock, step)
    assert chaos.tick(runs) == []  # the exit cannot fire yet, and the SIGTERM waits behind it
    ranks_up[0] = True
    assert [f.fault.kind for f in chaos.tick(runs)] == ["exit"]
    clock.now += 1
    timeline.add("attempt_restarted", "master", mode="reschedule")
    clock.now += 1
    timeline.add("step", "master", step=41)
    assert [f.fault.kind for f in chaos.tick(runs)] == ["term"]


def test_a_counted_fault_whose_task_finished_holds_nothing_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chaos_driver, "inject", lambda fault, **_: Injection(f"{fault.kind} injected", (1,)))
    clock = Clock()
    timeline = Timeline(clock=clock)
    plan = parse_chaos("kill:worker_1@1ckpt,term:master@2ckpt", TASKS)
    chaos = ChaosDriver(plan, TASKS, timeline, stop_grace_s=5, clock=clock)
    runs = {"master": FakeRun(), "worker_1": FakeRun(finished=True)}
    for step in (10, 20):
        _upload(timeline, clock, step)
    assert [f.fault.kind for f in chaos.tick(runs)] == ["term"]
