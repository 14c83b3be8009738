"""A reschedule off a node the policy blames is infrastructure recovery, not the job failing."""

from __future__ import annotations

from typing import Any

from tests.test_policy import diagnosis, failure, history_of
from wrapper.decision import Decision
from wrapper.policy import Budgets, decide


def _gpu_fault_on(node: str, history_attempts: list[dict[str, Any]], budgets: Budgets):  # type: ignore[no-untyped-def]
    return decide(diagnosis("gpu-hardware-fault"), history_of(*history_attempts), budgets,
                  node=node, allocation=f"alloc-{len(history_attempts)}", step=100,
                  retries_used_in_allocation=0)


def test_independent_hardware_faults_on_different_nodes_do_not_abort_the_job() -> None:
    # 16K GPUs: several GPUs die on different nodes before the next checkpoint. Each node
    # is excluded and replaced; the failure budget (2 reschedules) is not what stops it.
    budgets = Budgets(max_reschedules=2, max_node_replacements=4)
    attempts: list[dict[str, Any]] = []
    for index in range(4):
        d = _gpu_fault_on(f"node-{index}", attempts, budgets)
        assert (d.action, d.exclude_node, d.reschedules_left) == (Decision.RESCHEDULE, True, 2)
        assert "no failure budget spent" in d.reason
        attempts.append(failure("gpu-hardware-fault", "reschedule", node=f"node-{index}",
                                exclude_node=True, node_replacement=True))
    # beyond the replacement cap without progress, the failure budget takes over...
    fifth = _gpu_fault_on("node-4", attempts, budgets)
    assert fifth.action is Decision.RESCHEDULE and fifth.reschedules_left == 1
    attempts.append(failure("gpu-hardware-fault", "reschedule", node="node-4", exclude_node=True))
    attempts.append(failure("gpu-hardware-fault", "reschedule", node="node-5", exclude_node=True))
    # ... and when that is spent too, the fault follows the job, not its nodes: abort
    assert _gpu_fault_on("node-6", attempts, budgets).action is Decision.ABORT


def test_progress_resets_the_replacement_count() -> None:
    budgets = Budgets(max_reschedules=0, max_node_replacements=1)
    before = [failure("gpu-hardware-fault", "reschedule", node="node-0", step=100, exclude_node=True,
                      node_replacement=True)]
    at_200 = decide(diagnosis("gpu-hardware-fault"), history_of(*before), budgets, node="node-1",
                    allocation="a2", step=200, retries_used_in_allocation=0)
    assert at_200.action is Decision.RESCHEDULE
    at_100 = decide(diagnosis("gpu-hardware-fault"), history_of(*before), budgets, node="node-1",
                    allocation="a2", step=100, retries_used_in_allocation=0)
    assert at_100.action is Decision.ABORT


def test_a_node_that_merely_failed_twice_is_excluded_but_the_move_spends_budget() -> None:
    # a network error twice on one node: escalated to reschedule, the node is excluded
    # by the failed-twice heuristic, but the rule does not blame the node: no free pass
    history = history_of(failure("nccl-error", "retry", node="n1"))
    d = decide(diagnosis("nccl-error"), history, Budgets(max_reschedules=2), node="n1",
               allocation="a1", step=100, retries_used_in_allocation=1)
    assert (d.action, d.exclude_node, d.node_replacement) == (Decision.RESCHEDULE, True, False)
    assert d.reschedules_left == 1 and "no failure budget spent" not in d.reason
