"""The kill -> first step breakdown of benchmarks/recovery.py, on a known timeline."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from workflows.backends.local.report import fault_metrics
from workflows.backends.local.timeline import Timeline, parse_line

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def recovery():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("recovery_bench", REPO / "benchmarks" / "recovery.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_training_load_line_becomes_a_timeline_event() -> None:
    timeline = Timeline()
    event = parse_line("resched-train: checkpoint loaded in 0.512 s\n", "train", timeline, attempt=2)
    assert event is not None and event.kind == "checkpoint_loaded"
    assert event.fields["load_s"] == 0.512
    assert parse_line("resched-train: checkpoint loaded in soon s", "train", timeline, attempt=2) is None


def test_each_phase_of_a_restart_is_its_own_gap(recovery) -> None:  # type: ignore[no-untyped-def]
    timeline = Timeline()
    timeline.add("step", "train", t=99.0, step=40)
    timeline.add("fault_injected", "train", t=100.0, spec="kill@10s")
    timeline.add("wrapper_failure_detected", "train", t=100.30, exit_seen_at=100.10, sweep_s=0.15)
    timeline.add("wrapper_decision", "train", t=100.35, decision="retry")
    timeline.add("wrapper_attempt_started", "train", t=100.36)
    timeline.add("checkpoint_loaded", "train", t=104.36, load_s=0.5)
    timeline.add("training_resumed", "train", t=104.37, step=30)
    timeline.add("step", "train", t=104.46, step=31)
    events = [e.to_json() for e in timeline.events]
    phases = recovery.restart_phases(events, fault_metrics(timeline.events))
    assert phases == {
        "kill_to_first_step_median_s": 4.46, "exit_seen_median_s": 0.1, "reap_median_s": 0.2,
        "decide_median_s": 0.05, "relaunch_median_s": 0.01, "torch_start_median_s": 3.5,
        "load_median_s": 0.5, "first_step_median_s": 0.1,
    }
