"""A chaos spec that cannot fire says so at once (one line), and a random spec that
injected nothing says why at the end (no processes: injection is replaced)."""

from __future__ import annotations

import pytest

from tests.test_chaos_driver import TASKS, Clock, FakeRun
from workflows.backends.local import chaos_driver
from workflows.backends.local.chaos import parse_chaos
from workflows.backends.local.chaos_driver import ChaosDriver
from workflows.backends.local.inject import Injection
from workflows.backends.local.timeline import Timeline


@pytest.fixture(autouse=True)
def _no_injection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chaos_driver, "inject",
                        lambda fault, **_: Injection(f"{fault.kind} injected", (1,)))


def _driver(spec: str, checkpointed: set[str]) -> tuple[ChaosDriver, Timeline, Clock, list[str]]:
    clock, said = Clock(), []
    timeline = Timeline(clock=clock)
    driver = ChaosDriver(parse_chaos(spec, TASKS), TASKS, timeline, stop_grace_s=1.0,
                         clock=clock, checkpointed_tasks=checkpointed, on_warning=said.append)
    return driver, timeline, clock, said


def test_nckpt_in_a_workflow_without_checkpoint_uploads_warns_at_once() -> None:
    _, _, _, said = _driver("kill:worker_1@2ckpt,kill:master@1ckpt", set())
    assert len(said) == 2 and "kill:worker_1@2ckpt can never fire" in said[0]


def test_nckpt_on_a_task_without_uploads_counts_the_runs_uploads() -> None:
    # the straggler demo slows worker_1 at the master's first upload: no warning
    _, _, _, said = _driver("slow:worker_1=8@1ckpt", {"master"})
    assert said == []


def test_random_with_no_progress_warns_after_a_minute_then_counts_run_time() -> None:
    driver, _, clock, said = _driver("random:mtbf=10s,seed=1,kinds=kill", set(TASKS))
    runs = {name: FakeRun() for name in TASKS}
    clock.now = chaos_driver.NO_PROGRESS_S - 1  # a slow start-up is no reason yet
    assert driver.tick(runs) == [] and said == []
    clock.now = chaos_driver.NO_PROGRESS_S
    driver.tick(runs)
    assert len(said) == 1 and "no training step seen" in said[0]
    clock.now = chaos_driver.NO_PROGRESS_S + 1000.0  # far beyond any exponential draw of mean 10 s with this seed
    assert len(driver.tick(runs)) == 1
    assert driver.final_notes() == said  # it fired: only the warning remains


def test_random_that_injected_nothing_says_so_at_the_end() -> None:
    driver, timeline, clock, said = _driver("random:mtbf=1h,seed=1", set(TASKS))
    timeline.add("step", "master", step=1)
    clock.now = 43.0
    driver.tick({name: FakeRun() for name in TASKS})
    notes = driver.final_notes()
    assert said == [] and len(notes) == 1 and "injected no fault in 43 s" in notes[0]
