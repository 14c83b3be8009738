"""Honest ETTR against hand-computed timelines: measured, fault-free, model, lost time."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.report_fixtures import fault_free_run, one_fault_run
from workflows import recovery_math
from workflows.backends.local.ettr import ettr_lines, largest_loss
from workflows.errors import UsageError
from workflows.report.load import add_baseline, load_report


def test_lost_time_adds_up_to_the_wall_time_by_cause(tmp_path: Path) -> None:
    report = load_report(one_fault_run().write(tmp_path / "run"))
    m, parts = report["metrics"], report["time_breakdown"]
    assert m["wall_s"] == pytest.approx(18.1) and m["step_s"] == 1.0
    assert (m["useful_steps"], m["useful_s"]) == (12, 12.0)
    assert m["ettr"] == pytest.approx(12 / 18.1, abs=1e-4)
    assert parts["startup"] == pytest.approx(1.0)
    assert parts["checkpoint_saves"] == pytest.approx(0.5)
    assert parts["detection"] == pytest.approx(0.5)
    assert parts["restart_to_first_step"] == pytest.approx(2.0)
    assert parts["recomputed_lost_steps"] == pytest.approx(2.0)
    assert parts["other"] == pytest.approx(0.1, abs=1e-3)
    assert sum(v for v in parts.values() if v) == pytest.approx(18.1)
    worst = largest_loss(parts)  # restart and lost work tie at 2.0 s here
    assert worst is not None and worst[0] in ("restart_to_first_step", "recomputed_lost_steps")
    assert worst[1] == pytest.approx(2.0)


def test_model_uses_the_measured_interval_and_the_optimum(tmp_path: Path) -> None:
    m = load_report(one_fault_run().write(tmp_path / "run"))["metrics"]
    # saves after step 4 (t=5) and step 8 (t=9.25): the interval used is 4.25 s
    assert m["checkpoint_interval_s"] == pytest.approx(4.25)
    assert (m["checkpoint_cost_s"], m["mtbf_s"]) == (0.25, pytest.approx(18.1))
    assert (m["detection_s"], m["resume_s"]) == (pytest.approx(0.5), pytest.approx(3.0))
    steady = (18.1 - 1.0) / 18.1
    used = 1 - (0.25 / 4.25 + 4.25 / (2 * 18.1) + 3.5 / 18.1)
    assert m["ettr_model_used"] == pytest.approx(used * steady, abs=1e-4)
    tau = math.sqrt(2 * 0.25 * 18.1)
    assert m["tau_opt_s"] == pytest.approx(tau, abs=1e-3)
    best = 1 - (0.25 / tau + tau / (2 * 18.1) + 3.5 / 18.1)
    assert m["ettr_model_optimal"] == pytest.approx(best * steady, abs=1e-4)
    assert m["ettr_model_optimal"] >= m["ettr_model_used"]
    assert m["tau_daly_s"] == pytest.approx(recovery_math.daly_interval(0.25, 18.1), abs=1e-3)
    # one fault in 18 s is far too frequent for a first-order model: the report says so
    assert m["model_in_range"] is False
    report = load_report(tmp_path / "run")
    assert "too frequent for this first-order model" in "\n".join(
        ettr_lines(report["metrics"], report["time_breakdown"], None))


def test_baseline_is_the_upper_bound_and_prices_the_faults(tmp_path: Path) -> None:
    report = load_report(one_fault_run().write(tmp_path / "run"))
    add_baseline(report, fault_free_run().write(tmp_path / "clean"))
    base = report["baseline"]
    assert base["baseline_wall_s"] == pytest.approx(13.75)
    assert base["ettr_fault_free"] == pytest.approx(12 / 13.75, abs=1e-4)
    assert base["ettr_vs_fault_free"] == pytest.approx((12 / 18.1) / (12 / 13.75), abs=1e-3)
    assert base["fault_free_wall_s"] == pytest.approx(13.75)
    assert base["cost_of_faults_s"] == pytest.approx(18.1 - 13.75)
    text = "\n".join(ettr_lines(report["metrics"], report["time_breakdown"], base))
    assert "fault-free run train-clean: ETTR 0.87 (the upper bound here)" in text
    assert "the faults cost 4.3 s" in text or "the faults cost 4.4 s" in text
    assert "largest: restart (2.0 s)" in text or "largest: lost work (2.0 s)" in text


def test_without_a_baseline_the_report_says_how_to_measure_one(tmp_path: Path) -> None:
    report = load_report(one_fault_run().write(tmp_path / "run"))
    text = "\n".join(ettr_lines(report["metrics"], report["time_breakdown"], None))
    assert "without --chaos" in text and "--baseline" in text
    assert "bound" not in report["summary"]


def test_a_baseline_with_faults_or_another_workflow_is_refused(tmp_path: Path) -> None:
    report = load_report(one_fault_run().write(tmp_path / "run"))
    with pytest.raises(UsageError, match="must be fault-free"):
        add_baseline(report, one_fault_run().write(tmp_path / "faulty"))
    other = fault_free_run()
    other.workflow = "another"
    with pytest.raises(UsageError, match="workflow 'another'"):
        add_baseline(report, other.write(tmp_path / "other"))
    with pytest.raises(UsageError, match="not COMPLETED"):
        add_baseline(report, fault_free_run().write(tmp_path / "failed", status="FAILED"))


def test_a_fault_before_the_first_step_is_start_up_not_counted_twice(tmp_path: Path) -> None:
    from tests.report_fixtures import ReportBuilder

    run = ReportBuilder()
    run.at(0.5, "fault_injected", spec="kill:master@0s", fault="kill", attempt=1)
    run.at(0.7, "wrapper_failure_detected", signal=9, attempt=1)
    run.at(0.8, "wrapper_decision", decision="retry", attempt=1)
    run.at(1.0, "wrapper_attempt_started", w_attempt=2, attempt=1)
    run.steps(1, 4, 1.0)  # step 1 ends at 2.0
    run.attempt(0.0, run.t)
    report = load_report(run.write(tmp_path / "run"))
    m, parts = report["metrics"], report["time_breakdown"]
    assert m["faults_before_first_step"] == 1 and parts["startup"] == pytest.approx(1.0)
    assert parts["detection"] == 0.0 and parts["restart_to_first_step"] == 0.0
    assert sum(v for v in parts.values() if v) == pytest.approx(m["wall_s"])
    text = "\n".join(ettr_lines(m, parts, None))
    assert "start-up includes the recovery from 1 fault(s)" in text
