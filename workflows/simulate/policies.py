"""Who decides after a failure: resched's real policy, or a baseline with its own rules.

``ReschedPolicy`` runs the wrapper's code itself: the rule catalogue classifies what the
failure leaves in the log (once per kind: the same text gives the same diagnosis), and
``wrapper.policy.decide`` decides on the real ``History`` (budgets, reset on progress,
escalation, node memory), which grows with every attempt exactly as ``HistoryStore``
would write it. The baselines are the alternatives a team has without resched, each
with the mechanics (detection, restarts, node exclusion) it really has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from workflows.simulate.failures import FailureKind
from wrapper.classifier import Diagnosis, Evidence, LineScanner, judge
from wrapper.decision import Decision
from wrapper.history import History, with_outcome
from wrapper.policy import Budgets, decide
from wrapper.classifier.rules import RuleSet, load_rules


class Action(StrEnum):
    RETRY = "retry"  # restart in place, same nodes
    RESCHEDULE = "reschedule"  # new allocation / pod: broken nodes are replaced
    FAIL = "fail"  # the job ends failed (abort, or a budget used up)


@dataclass(frozen=True)
class Verdict:
    action: Action
    exclude_node: bool  # replace the failing node even if it still works
    rule: str = ""


@dataclass(frozen=True)
class Failure:
    """What a policy is told about one failure."""

    kind: FailureKind
    node: str
    checkpoint_step: int  # durable checkpoints so far (progress)


class Policy(Protocol):
    name: str
    hang_detection: str  # "resched" (hang timeout) or "watchdog" (NCCL's collective timeout)

    def decide(self, failure: Failure) -> Verdict: ...

    def reset(self) -> None: ...


def diagnose(kind: FailureKind, rules: RuleSet) -> Diagnosis:
    """The real judge (the one `resched wrap` and `resched classify` use) on the kind's
    log lines and exit."""
    scanner = LineScanner(rules)
    for line in kind.log:
        scanner.feed(line, "stderr")
    evidence = Evidence(exit_code=kind.exit_code, signal=kind.signal, hits=scanner.hits,
                        hung=kind.detection == "hang")
    return judge(evidence, rules)


@dataclass
class ReschedPolicy:
    """resched's decision code, unchanged: classify + decide on the growing history."""

    budgets: Budgets = field(default_factory=Budgets)
    name: str = "resched"
    hang_detection: str = "resched"
    rules: RuleSet = field(default_factory=lambda: load_rules(()))

    def __post_init__(self) -> None:
        self._diagnoses: dict[str, Diagnosis] = {}
        self.reset()

    def reset(self) -> None:
        self.history = History()
        self.allocation = 0
        self.retries_in_allocation = 0

    def diagnosis(self, kind: FailureKind) -> Diagnosis:
        if kind.name not in self._diagnoses:
            self._diagnoses[kind.name] = diagnose(kind, self.rules)
        return self._diagnoses[kind.name]

    def decide(self, failure: Failure) -> Verdict:
        diagnosis = self.diagnosis(failure.kind)
        allocation = f"alloc-{self.allocation}"
        decision = decide(diagnosis, self.history, self.budgets, node=failure.node,
                          allocation=allocation, step=failure.checkpoint_step,
                          retries_used_in_allocation=self.retries_in_allocation)
        # the attempt record, as the wrapper writes it (the fields the history reads)
        self.history = with_outcome(self.history, {
            "node": failure.node, "allocation": allocation, "rule": diagnosis.rule_id,
            "category": diagnosis.category, "decision": str(decision.action),
            "counts_as_failure": diagnosis.counts_as_failure,
            "checkpoint_step_before": failure.checkpoint_step,
            "checkpoint_step_after": failure.checkpoint_step,
            "exit_code": failure.kind.exit_code, "exclude_node": decision.exclude_node,
            "node_replacement": decision.node_replacement,
        })
        action = Decision.parse(decision.action)
        if action is Decision.RETRY:
            self.retries_in_allocation += 1
            return Verdict(Action.RETRY, decision.exclude_node, diagnosis.rule_id)
        if action is Decision.RESCHEDULE:
            self.allocation += 1
            self.retries_in_allocation = 0
            return Verdict(Action.RESCHEDULE, decision.exclude_node, diagnosis.rule_id)
        return Verdict(Action.FAIL, decision.exclude_node, diagnosis.rule_id)


@dataclass
class CappedBaseline:
    """A baseline that answers every failure with one action until a count that never
    resets runs out, with no node memory:

    - ``osmo-static``: OSMO alone; every failure exit is a RESCHEDULE exit action, up to
      the pool's ``max_retry_per_task``; hangs only by NCCL's watchdog.
    - ``torchrun``: the elastic agent restarts every worker in place up to
      ``--max-restarts``; NCCL's watchdog sees hangs."""

    name: str
    action: Action
    limit: int
    hang_detection: str
    why: str
    used: int = field(default=0, init=False)

    def reset(self) -> None:
        self.used = 0

    def decide(self, failure: Failure) -> Verdict:
        if self.used >= self.limit:
            return Verdict(Action.FAIL, False, f"{self.why}: limit {self.limit} reached")
        self.used += 1
        return Verdict(self.action, False, self.why)


def osmo_static(retry_limit: int = 3) -> CappedBaseline:
    return CappedBaseline("osmo-static", Action.RESCHEDULE, retry_limit, "watchdog", "exit action")


def torchrun_restarts(max_restarts: int = 3) -> CappedBaseline:
    return CappedBaseline("torchrun", Action.RETRY, max_restarts, "watchdog", "restart")


@dataclass
class NemoBudgets:
    """NeMo's fault-tolerance plugin: ``num_in_job_restarts`` in-place restarts per
    allocation, then one of ``num_job_retries_on_failure`` new allocations; the counts
    never reset and nothing remembers a node. NVRx's heartbeat timeouts see hangs."""

    in_job_restarts: int = 3
    job_retries: int = 2
    name: str = "nemo-budgets"
    hang_detection: str = "resched"

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.restarts = 0
        self.retries = 0

    def decide(self, failure: Failure) -> Verdict:
        if self.restarts < self.in_job_restarts:
            self.restarts += 1
            return Verdict(Action.RETRY, False, "in-job restart")
        if self.retries < self.job_retries:
            self.retries += 1
            self.restarts = 0
            return Verdict(Action.RESCHEDULE, False, "job retry")
        return Verdict(Action.FAIL, False, "budgets used up")


POLICIES = ("resched", "osmo-static", "nemo-budgets", "torchrun")


def make_policy(name: str) -> Policy:
    if name == "resched":
        return ReschedPolicy()
    if name == "osmo-static":
        return osmo_static()
    if name == "nemo-budgets":
        return NemoBudgets()
    if name == "torchrun":
        return torchrun_restarts()
    raise ValueError(f"unknown policy {name!r}: one of {', '.join(POLICIES)}")
