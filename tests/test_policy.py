"""Policy: pure decisions from a diagnosis, a history and budgets (no clock, no I/O)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wrapper.backoff import Backoff
from wrapper.classifier.classify import Diagnosis
from wrapper.history import History, _with_outcome
from wrapper.policy import Budgets, decide
from wrapper.classifier.rules import load_rules

RULES = load_rules()


def diagnosis(rule_id: str) -> Diagnosis:
    rule = RULES.by_id(rule_id)
    assert rule is not None
    return Diagnosis(
        rule_id=rule.id, category=rule.category, decision=rule.decision, hint=rule.hint, evidence=(),
        rank_exit_codes={}, root_cause_rank=None, exclude_node=rule.exclude_node,
        counts_as_failure=rule.counts_as_failure, escalate=rule.escalate, deterministic=rule.deterministic,
    )


def history_of(*attempts: dict[str, Any]) -> History:
    history = History()
    for attempt in attempts:
        history = _with_outcome(history, attempt)
    return history


def failure(rule: str, decision: str, *, node: str = "n1", allocation: str = "a1", step: int | None = 100,
            **extra: Any) -> dict[str, Any]:
    return {"rule": rule, "decision": decision, "node": node, "allocation": allocation,
            "checkpoint_step_after": step, "counts_as_failure": True, **extra}


EMPTY = History()
DEFAULT_BUDGETS = Budgets()


def run(rule_id: str, history: History = EMPTY, budgets: Budgets = DEFAULT_BUDGETS, *, node: str = "n1",
        allocation: str = "a1", step: int | None = 100, retries: int = 0):
    return decide(diagnosis(rule_id), history, budgets, node=node, allocation=allocation, step=step,
                  retries_used_in_allocation=retries)


def test_retry_with_exponential_backoff_then_reschedule_then_abort() -> None:
    attempts: list[dict[str, Any]] = []
    seen = []
    for _ in range(8):
        d = run("killed-by-signal", history_of(*attempts), Budgets(max_retries=3, max_reschedules=2), retries=len(attempts))
        seen.append((d.action, d.backoff_s, d.retries_left, d.reschedules_left))
        if d.action == "abort":
            break
        # killed-by-signal escalates after one occurrence: use a rule without escalation
        attempts.append(failure("killed-by-signal", d.action))
    assert seen[0] == ("retry", 0.0, 2, 2)  # the first in-place retry does not wait
    assert seen[1][0] == "reschedule"  # killed twice -> reschedule (escalate after 1)


def test_plain_retry_budget_and_backoff() -> None:
    budgets = Budgets(max_retries=3, max_reschedules=2, backoff=Backoff(base_s=1.0, max_s=3.0, jitter=0.0))
    attempts: list[dict[str, Any]] = []
    actions = []
    allocation = 0
    for _ in range(20):
        node, alloc = f"n{len(attempts)}", f"a{allocation}"
        d = run("megatron-rerun-17-transient", history_of(*attempts), budgets, node=node, allocation=alloc)
        actions.append((d.action, d.backoff_s))
        if d.action == "abort":
            break
        attempts.append(failure("megatron-rerun-17-transient", d.action, node=node, allocation=alloc))
        allocation += d.action == "reschedule"
    assert actions[:3] == [("retry", 0.0), ("retry", 1.0), ("retry", 2.0)]  # first at once, then doubling
    assert actions[3] == ("reschedule", 0.0)
    assert actions[-1][0] == "abort"
    assert [a for a, _ in actions] == (["retry"] * 3 + ["reschedule"]) * 2 + ["retry"] * 3 + ["abort"]
    assert "reschedule budget used up" in run("megatron-rerun-17-transient", history_of(*attempts), budgets,
                                              node="n99", allocation="a2", retries=3).reason


def test_retries_are_counted_per_allocation() -> None:
    history = history_of(*[failure("megatron-rerun-17-transient", "retry", node=f"n{i}", allocation="old") for i in range(3)])
    assert run("megatron-rerun-17-transient", history, node="x", allocation="old").action == "reschedule"
    assert run("megatron-rerun-17-transient", history, node="x", allocation="new").action == "retry"


def test_preemption_and_graceful_stop_spend_nothing_even_with_budgets_exhausted() -> None:
    exhausted = history_of(*[failure("unknown", "reschedule", node=f"n{i}") for i in range(5)])
    for rule in ("preempted", "graceful-stop-unfinished"):
        d = run(rule, exhausted, Budgets(max_reschedules=2))
        assert d.action == "reschedule"
        assert d.reschedules_left == 0 and "no budget spent" in d.reason
        assert d.exclude_node is False


def test_budgets_reset_after_progress() -> None:
    history = history_of(*[failure("megatron-rerun-17-transient", "retry", node=f"n{i}", step=100) for i in range(3)])
    assert run("megatron-rerun-17-transient", history, node="x", step=100).action == "reschedule"
    d = run("megatron-rerun-17-transient", history, node="x", step=200)
    assert (d.action, d.retries_left) == ("retry", 2)
    d = run("megatron-rerun-17-transient", history, Budgets(reset_on_progress=False), node="x", step=200, retries=3)
    assert d.action == "reschedule"


def test_same_deterministic_failure_twice_aborts_early() -> None:
    history = history_of(failure("unknown-failure", "retry", step=300))
    d = run("unknown-failure", history, step=300)
    assert d.action == "abort"
    assert "already happened at checkpoint step 300" in d.reason and "aborting early" in d.reason
    assert run("unknown-failure", history, step=400).action == "retry"  # progress since: not the same failure


def test_illegal_memory_access_retry_once_then_node_then_code() -> None:
    first = run("cuda-illegal-memory-access")
    assert first.action == "retry"
    same_node = run("cuda-illegal-memory-access", history_of(failure("cuda-illegal-memory-access", "retry")))
    assert same_node.action == "reschedule" and same_node.exclude_node
    assert "seen 1 time(s) before on this node" in same_node.reason
    other_node = run("cuda-illegal-memory-access",
                     history_of(failure("cuda-illegal-memory-access", "reschedule", node="n1")), node="n2")
    assert other_node.action == "abort" and "on node n1" in other_node.reason


def test_nccl_error_escalates_only_when_it_recurs_on_the_same_node() -> None:
    elsewhere = history_of(failure("nccl-error", "retry", node="n7"))
    assert run("nccl-error", elsewhere, node="n1").action == "retry"
    here = history_of(failure("nccl-error", "retry", node="n1"))
    assert run("nccl-error", here, node="n1").action == "reschedule"


def test_node_that_failed_twice_is_marked_for_exclusion() -> None:
    d = run("dist-error", history_of(failure("rendezvous-timeout", "retry", node="n1")), node="n1")
    assert d.exclude_node and "failed this task 2 times" in d.reason
    assert not run("dist-error", history_of(failure("rendezvous-timeout", "retry", node="n5")), node="n1").exclude_node


@pytest.mark.parametrize("rule", ["gpu-hardware-fault", "megatron-rerun-16", "nvrx-exclude-node"])
def test_node_suspect_rules_exclude_the_node_on_first_failure(rule: str) -> None:
    d = run(rule, node="dgx-a17")
    assert (d.action, d.exclude_node) == ("reschedule", True)
    # moving off a blamed node is infrastructure recovery: no failure budget spent
    assert "node dgx-a17 marked for exclusion" in d.reason and d.reschedules_left == 2
    assert "no failure budget spent" in d.reason


def test_abort_rules_abort_and_complete_completes() -> None:
    assert run("cuda-oom").action == "abort"
    d = run("complete")
    assert (d.action, d.exclude_node) == ("complete", False)
    spent = history_of(*[failure("x", "reschedule", node=f"n{i}") for i in range(2)])
    assert run("megatron-rerun-16", spent).action == "reschedule"  # a node replacement is free
    no_replacements = Budgets(max_node_replacements=0)
    assert run("megatron-rerun-16", spent, no_replacements).action == "abort"


def test_reason_reads_as_a_sentence() -> None:
    d = run("megatron-rerun-16", node="dgx-a17")
    assert d.reason.startswith("rule megatron-rerun-16 (megatron-rerun): Megatron exit 16 (resume to disambiguate) -> reschedule")
    assert d.reason.endswith("retries left 3/3, reschedules left 2/2")


def test_host_oom_retry_once_then_abort() -> None:
    assert run("host-oom-kill").action == "retry"
    assert run("host-oom-kill", history_of(failure("host-oom-kill", "retry", step=50)), step=100).action == "retry"
    assert run("host-oom-kill", history_of(failure("host-oom-kill", "retry"))).action == "abort"


def test_in_job_restarts_reported_by_the_caller_count_against_retries() -> None:
    # ft_launcher restarted the workers twice inside this attempt: not in the history
    d = run("megatron-rerun-17-transient", EMPTY, node="x", retries=2)
    assert (d.action, d.retries_left) == ("retry", 0)
    history = history_of(failure("megatron-rerun-17-transient", "retry", node="y", step=100))
    assert run("megatron-rerun-17-transient", history, node="x", step=200, retries=1).retries_left == 2
    assert run("megatron-rerun-17-transient", history, node="x", step=200, retries=3).retries_left == 0


_FAILURE_RULES = sorted(r.id for r in RULES.rules if r.counts_as_failure and r.decision != "complete")


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(_FAILURE_RULES), min_size=1, max_size=60),
       st.integers(min_value=0, max_value=4), st.integers(min_value=0, max_value=3), st.booleans())
def test_without_progress_every_failure_sequence_ends_in_abort(rules: list[str], max_retries: int,
                                                                max_reschedules: int, same_node: bool) -> None:
    """Retries that never stop are impossible: without checkpoint progress, the number of
    retry + reschedule decisions is bounded by the budgets, whatever fails."""
    budgets = Budgets(max_retries=max_retries, max_reschedules=max_reschedules)
    attempts: list[dict[str, Any]] = []
    allocation, non_abort = 0, 0
    for i in range(200):
        node = "n0" if same_node else f"n{allocation}"
        d = run(rules[i % len(rules)], history_of(*attempts), budgets, node=node, allocation=f"a{allocation}")
        assert d.retries_left >= 0 and d.reschedules_left >= 0 and d.reason
        if d.action == "abort":
            break
        non_abort += 1
        attempts.append(failure(rules[i % len(rules)], d.action, node=node, allocation=f"a{allocation}",
                                exclude_node=d.exclude_node, node_replacement=d.node_replacement))
        allocation += d.action == "reschedule"
    else:
        raise AssertionError("never aborted")
    # node replacements (reschedules off a blamed node) are free up to their own cap
    moves = max_reschedules + budgets.max_node_replacements
    assert non_abort <= (max_retries + 1) * (moves + 1)
