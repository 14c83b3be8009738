"""Megatron exits 16 / 17 over time, and the stop-signal bookkeeping (pure logic)."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from wrapper.classifier.classify import Diagnosis
from wrapper.history import History, _with_outcome
from wrapper.policy import Budgets, decide
from wrapper.classifier.rules import load_rules
from wrapper.stop_outcome import StepTracker, StopSignalError, judge_stop, parse_stop_signal

RULES = load_rules()


def diagnosis(rule_id: str) -> Diagnosis:
    rule = RULES.by_id(rule_id)
    assert rule is not None
    return Diagnosis(
        rule_id=rule.id, category=rule.category, decision=rule.decision, hint=rule.hint,
        evidence=(), rank_exit_codes={}, root_cause_rank=None, exclude_node=rule.exclude_node,
        counts_as_failure=rule.counts_as_failure, escalate=rule.escalate,
        deterministic=rule.deterministic,
    )


def attempt(rule: str, decision: str, *, node: str, step: int, code: int,
            allocation: str = "a1") -> dict[str, Any]:
    # as the wrapper records it: ft_launcher's exit 1, the rank's 17 recovered
    return {"rule": rule, "decision": decision, "node": node, "allocation": allocation,
            "checkpoint_step_after": step, "counts_as_failure": True, "exit_code": 1,
            "rank_exit_codes": {"1": code}}


def decide_now(rule: str, attempts: list[dict[str, Any]], *, node: str, step: int,
               allocation: str = "a1", budgets: Budgets = Budgets(max_retries=9,
                                                                max_reschedules=9)):
    history = History()
    for item in attempts:
        history = _with_outcome(history, item)
    return decide(diagnosis(rule), history, budgets, node=node, allocation=allocation,
                  step=step, retries_used_in_allocation=0)


def test_repeated_17_without_progress_escalates_to_abort() -> None:
    done: list[dict[str, Any]] = []
    actions = []
    for index in range(6):
        node = f"n{index // 2}"
        d = decide_now("megatron-rerun-17-transient", done, node=node, step=500)
        actions.append(d.action)
        if d.action == "abort":
            assert "exit 17 came back 4 times at checkpoint step 500" in d.reason
            break
        done.append(attempt("megatron-rerun-17-transient", d.action, node=node, step=500, code=17))
    assert actions == ["retry", "retry", "retry", "abort"]


def test_17_with_progress_between_keeps_retrying() -> None:
    done = [attempt("megatron-rerun-17-transient", "retry", node="n1", step=100 * i, code=17)
            for i in range(1, 6)]
    assert decide_now("megatron-rerun-17-transient", done, node="n1", step=600).action == "retry"
    # without the budget reset the guard still looks at the same step only
    d = decide_now("megatron-rerun-17-transient", done, node="n9", step=600,
                   budgets=Budgets(max_retries=9, max_reschedules=9, reset_on_progress=False))
    assert "exit 17 came back" not in d.reason


def test_16_that_follows_the_data_to_another_node_aborts() -> None:
    first = attempt("megatron-rerun-16", "reschedule", node="dgx-a17", step=1200, code=16)
    same_node = decide_now("megatron-rerun-16", [first], node="dgx-a17", step=1200)
    assert same_node.action == "reschedule" and same_node.exclude_node
    moved = decide_now("megatron-rerun-16", [first], node="dgx-b02", step=1200)
    assert moved.action == "abort"
    assert "from node dgx-a17 to dgx-b02" in moved.reason and "data or the code" in moved.reason
    later = decide_now("megatron-rerun-16", [first], node="dgx-b02", step=1300)
    assert later.action == "reschedule"  # progress since: a new suspicion, not a repeat


@pytest.mark.parametrize("text,expected", [
    ("TERM", signal.SIGTERM), ("sigusr1", signal.SIGUSR1), ("USR1", signal.SIGUSR1),
    ("15", signal.SIGTERM), (" INT ", signal.SIGINT), ("HUP", signal.SIGHUP),
])
def test_parse_stop_signal(text: str, expected: signal.Signals) -> None:
    assert parse_stop_signal(text) == expected


@pytest.mark.parametrize("text", ["KILL", "9", "STOP", "NOPE", "", "999", "-1", "TERM;rm"])
def test_parse_stop_signal_refuses_what_cannot_save(text: str) -> None:
    with pytest.raises(StopSignalError) as error:
        parse_stop_signal(text)
    assert "--stop-signal" in str(error.value) and "fix:" in str(error.value)


def test_step_tracker_reads_common_progress_lines() -> None:
    tracker = StepTracker()
    tracker.feed("resched-train: step 7 loss 0.3\n")
    tracker.feed(" [2024-05-01] iteration      120/    1000 | consumed samples: 3840\n")
    tracker.feed("Epoch 0: 10%| global_step=95 loss=1.2\n")
    tracker.feed("loading 3 shards\n")
    assert tracker.last_step == 120


def test_judge_stop() -> None:
    saved = judge_stop(step_before=100, step_after=140, last_step=140, checkpoint_known=True)
    assert (saved.saved, saved.steps_lost) == (True, 0)
    lost = judge_stop(step_before=100, step_after=100, last_step=137, checkpoint_known=True)
    assert (lost.saved, lost.steps_lost) == (False, 37)
    assert lost.summary.startswith("stopped, 37 steps lost")
    fresh = judge_stop(step_before=None, step_after=None, last_step=12, checkpoint_known=True)
    assert (fresh.saved, fresh.steps_lost) == (False, 12)
    unknown = judge_stop(step_before=1, step_after=1, last_step=None, checkpoint_known=True)
    assert "unknown number" in unknown.summary
    assert judge_stop(step_before=1, step_after=None, last_step=5,
                      checkpoint_known=False).saved is None
