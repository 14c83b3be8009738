"""Policy: diagnosis + history + budgets -> retry / reschedule / abort. Pure.

The order of questions (each answered from data only, no clock, no I/O):

1. complete -> complete.
2. Not a failure (preemption, graceful stop) -> the rule's decision (reschedule),
   spending nothing.
3. The rule says abort -> abort.
4. The same deterministic failure (same rule, same checkpoint step) seen before ->
   abort early instead of burning budgets (for a rule that suspects the node, only when
   it reproduced on a different node).
5. "Retry once, then X" rules (``escalate``): after N earlier occurrences (on this node
   or anywhere) the decision becomes X.
6. retry while in-place retries last in this allocation (exponential backoff), then
   reschedule.
7. reschedule while the failure-reschedule budget lasts, then abort. A reschedule that
   moves the job off a node the rule blames (a hardware rule, exit 16, a failed health
   check) is infrastructure recovery, not the job failing: it spends
   no failure budget (SkyPilot's two axes), up to ``max_node_replacements`` without
   checkpoint progress, beyond which the fault follows the job, not its nodes. At scale
   this matters: 16K GPUs see independent hardware faults on different nodes within
   one checkpoint interval, which a shared budget of 2 turned into an abort.

Budgets count failures since the checkpoint last advanced (``reset_on_progress``), so
a long run that keeps making progress is never aborted for a few scattered faults.
Node memory: a hardware rule, Megatron exit 16, ExcludeThisNode, or a node that failed
the task twice marks the node for exclusion.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from wrapper.backoff import Backoff
from wrapper.classifier.classify import Diagnosis
from wrapper.config import (
    DEFAULT_MAX_NODE_REPLACEMENTS,
    DEFAULT_MAX_RESCHEDULES,
    DEFAULT_MAX_RETRIES,
)
from wrapper.decision import Decision
from wrapper.history import History, PastAttempt

NODE_FAILURES_TO_EXCLUDE = 2


@dataclass(frozen=True)
class Budgets:
    max_retries: int = DEFAULT_MAX_RETRIES
    max_reschedules: int = DEFAULT_MAX_RESCHEDULES
    reset_on_progress: bool = True
    max_node_replacements: int = DEFAULT_MAX_NODE_REPLACEMENTS
    backoff: Backoff = field(default_factory=Backoff)  # first in-place retry: no wait


@dataclass(frozen=True)
class PolicyDecision:
    """What to do after one attempt, why, and what is left of the budgets."""

    action: Decision
    reason: str
    backoff_s: float
    exclude_node: bool
    retries_left: int
    reschedules_left: int
    node_replacement: bool = False  # a free reschedule off a node the rule blames


@dataclass(frozen=True)
class _Counts:
    window: tuple[PastAttempt, ...]  # failures since the checkpoint last advanced
    retries_used: int
    reschedules_used: int
    replacements: int  # reschedules off an excluded node (spend no failure budget)


def _counts(history: History, budgets: Budgets, allocation: str, step: int | None,
            retries_used_in_allocation: int) -> _Counts:
    failures = [a for a in history.past if a.failure]

    def retries_in(attempts: list[PastAttempt]) -> int:
        return sum(1 for a in attempts if a.allocation == allocation and a.decision is Decision.RETRY)

    recorded = retries_in(failures)
    if budgets.reset_on_progress and step is not None:
        failures = [a for a in failures if (-1 if a.step is None else a.step) >= step]
    # the caller's count may include restarts the history does not hold (ft_launcher's
    # in-job restarts): they count too, but only the recorded ones can be reset
    unrecorded = max(0, retries_used_in_allocation - recorded)
    if budgets.reset_on_progress:
        retries = retries_in(failures) + unrecorded
    else:
        retries = max(recorded, retries_used_in_allocation)
    moved = [a for a in failures if a.decision is Decision.RESCHEDULE]
    # the records say which moves were free node replacements (older records: none)
    replacements = sum(1 for a in moved if a.node_replacement)
    return _Counts(window=tuple(failures), retries_used=retries,
                   reschedules_used=len(moved) - replacements, replacements=replacements)


def _summary(diagnosis: Diagnosis) -> str:
    """The first sentence of the hint: what happened, in words."""
    hint = diagnosis.hint.strip()
    for stop in (". ", ": "):
        if stop in hint:
            hint = hint.split(stop, 1)[0]
    return hint.rstrip(".") or diagnosis.category


def _deterministic_repeat(diagnosis: Diagnosis, window: Sequence[PastAttempt], node: str,
                          step: int | None) -> str | None:
    if not diagnosis.deterministic or step is None:
        return None
    same = [a for a in window if a.rule == diagnosis.rule_id and a.step == step]
    node_suspect = diagnosis.escalate is not None and diagnosis.escalate.scope == "node"
    elsewhere = [a for a in same if a.node != node]
    if elsewhere:
        return (f"the same failure already happened at checkpoint step {step} on node "
                f"{elsewhere[-1].node}: it reproduces, so it is not the node")
    if same and not node_suspect:
        return f"the same failure already happened at checkpoint step {step}: it reproduces"
    return None


def _escalation(diagnosis: Diagnosis, window: Sequence[PastAttempt],
                node: str) -> tuple[Decision, str] | None:
    rule = diagnosis.escalate
    if rule is None or diagnosis.decision is not Decision.RETRY:
        return None
    earlier = [a for a in window if a.rule == diagnosis.rule_id
               and (rule.scope == "job" or a.node == node)]
    if len(earlier) < rule.after:
        return None
    where = " on this node" if rule.scope == "node" else ""
    return Decision.parse(rule.to), f"seen {len(earlier)} time(s) before{where}, so escalated to {rule.to}"


def decide(diagnosis: Diagnosis, history: History, budgets: Budgets, *, node: str, allocation: str,
           step: int | None, retries_used_in_allocation: int) -> PolicyDecision:
    counts = _counts(history, budgets, allocation, step, retries_used_in_allocation)
    retries_left = max(0, budgets.max_retries - counts.retries_used)
    reschedules_left = max(0, budgets.max_reschedules - counts.reschedules_used)
    head = f"rule {diagnosis.rule_id} ({diagnosis.category}): {_summary(diagnosis)}"

    def done(action: Decision, why: str, *, backoff: float = 0.0,
             spend: bool = True, budget: bool = True) -> PolicyDecision:
        exclude, node_note = _node_exclusion(diagnosis, history, node, spend)
        r_left = retries_left - (1 if action is Decision.RETRY and spend else 0)
        s_left = reschedules_left - (1 if action is Decision.RESCHEDULE and spend and budget else 0)
        budget_note = (f"retries left {r_left}/{budgets.max_retries}, "
                       f"reschedules left {s_left}/{budgets.max_reschedules}")
        parts = [f"{head} -> {action}", why, node_note,
                 budget_note if action is not Decision.COMPLETE else ""]
        return PolicyDecision(action=action, reason="; ".join(p for p in parts if p), backoff_s=backoff,
                              exclude_node=exclude, retries_left=r_left, reschedules_left=s_left,
                              node_replacement=action is Decision.RESCHEDULE and not budget)

    rule_decision = Decision.parse(diagnosis.decision)
    if rule_decision is Decision.COMPLETE:
        return done(Decision.COMPLETE, "", spend=False)
    if not diagnosis.counts_as_failure:
        return done(rule_decision, "not a failure: no budget spent", spend=False)
    if rule_decision is Decision.ABORT and _load_damage_after_fault(diagnosis, history, step):
        return done(Decision.RESCHEDULE, LOAD_DAMAGE_REASON) if reschedules_left > 0 else \
            done(Decision.ABORT, _join(LOAD_DAMAGE_REASON, "reschedule budget used up"))
    if rule_decision is Decision.ABORT:
        return done(Decision.ABORT, "retrying cannot help")
    megatron = megatron_over_time(diagnosis, counts.window, node, step)
    if megatron:
        return done(Decision.ABORT, megatron)
    repeat = _deterministic_repeat(diagnosis, counts.window, node, step)
    if repeat:
        return done(Decision.ABORT, f"{repeat}; aborting early instead of burning budgets")
    action, why = rule_decision, ""
    escalated = _escalation(diagnosis, counts.window, node)
    if escalated:
        action, why = escalated
    if action is Decision.RETRY:
        if retries_left > 0:
            backoff = budgets.backoff.delay_s(counts.retries_used, key=allocation)
            when = f"in {backoff:g} s" if backoff > 0 else "now"
            return done(Decision.RETRY, _join(why, f"retry in place {when}"), backoff=backoff)
        action = Decision.RESCHEDULE
        why = _join(why, f"in-place retries used up ({budgets.max_retries} in this allocation)")
    if action is Decision.RESCHEDULE:
        # free only when the rule itself blames the node (hardware, exit 16, a health
        # check): a node that merely failed twice may be a bug that follows the job
        moves = counts.replacements + counts.reschedules_used
        if (diagnosis.exclude_node and counts.replacements < budgets.max_node_replacements
                and moves < budgets.max_reschedules + budgets.max_node_replacements):
            return done(Decision.RESCHEDULE, _join(why, (
                f"the node is replaced: infrastructure recovery, no failure budget spent "
                f"({counts.replacements + 1}/{budgets.max_node_replacements} replacements "
                "without progress)")), budget=False)
        if reschedules_left > 0:
            return done(Decision.RESCHEDULE, why)
        return done(Decision.ABORT, _join(why, f"reschedule budget used up ({budgets.max_reschedules} failure reschedules)"))
    return done(action, why)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _node_exclusion(diagnosis: Diagnosis, history: History, node: str, spend: bool) -> tuple[bool, str]:
    if diagnosis.exclude_node:
        return True, f"node {node} marked for exclusion"
    failures = history.node_failures.get(node, 0) + (1 if spend else 0)
    if spend and failures >= NODE_FAILURES_TO_EXCLUDE:
        return True, f"node {node} has failed this task {failures} times: marked for exclusion"
    return False, ""


# ---- A crash while loading the checkpoint right after a fault (issue 19) -------------
# A framework that resumes from a save the fault cut (HF's get_last_checkpoint picks a
# checkpoint-N/ without trainer_state.json; DeepSpeed's `latest` names a torn tag) fails
# with a plain Python error (FileNotFoundError, KeyError, ...) that the catalogue calls a
# user bug. Right after a fault, with no checkpoint progress since, it is checkpoint
# damage: the job moves, and the next attempt restores the last good checkpoint from the
# store. (The relaunch check moves known torn saves aside first; this catches the rest.)
# Kept apart from the rule catalogue on purpose: it needs the history, which rules lack.
LOAD_DAMAGE_REASON = ("crashed loading the checkpoint right after a fault, with no progress "
                      "since: checkpoint damage, not a bug in the training; the next "
                      "attempt restores the last good checkpoint from the store")
_LOAD_EVIDENCE = re.compile(
    r"checkpoint|ckpt|trainer_state\.json|\.distcp|\.metadata|iter_\d{7}|global_step\d|"
    r"latest_checkpointed_iteration|model_states|optim_states|PytorchStreamReader|"
    r"\.safetensors", re.IGNORECASE)


def _load_damage_after_fault(diagnosis: Diagnosis, history: History, step: int | None) -> bool:
    if diagnosis.category != "user-code" or not history.past:
        return False
    last = history.past[-1]
    if last.decision not in (Decision.RETRY, Decision.RESCHEDULE) or last.step != step:
        return False
    return any(_LOAD_EVIDENCE.search(line.text) for line in diagnosis.evidence)


# ---- Megatron exits 16 / 17 over time (nvrx slice) ------------------------------------
# Megatron-LM users report resumes after exit 17 that crash again at the same iteration
# (NVIDIA/Megatron-LM issue tracker); the re-run state machine moves a 16 to another node
# precisely to tell the GPU from the data / code. So: exit 17 seen this many times before
# at the same checkpoint step (no progress in between) aborts; an exit 16 that comes back
# at the same step on a different node aborts (the fault followed the data or the code).
REPEATED_17_LIMIT = 3


def megatron_over_time(diagnosis: Diagnosis, window: Sequence[PastAttempt], node: str,
                       step: int | None) -> str | None:
    """Why a Megatron 16 / 17 must abort now, from the earlier attempts; None to go on."""
    if step is None or not diagnosis.rule_id.startswith("megatron-rerun-1"):
        return None
    same_step = [a for a in window if a.step == step]
    if diagnosis.rule_id.startswith("megatron-rerun-17"):
        earlier = [a for a in same_step if 17 in a.exit_codes]
        if len(earlier) >= REPEATED_17_LIMIT:
            return (f"exit 17 came back {len(earlier) + 1} times at checkpoint step {step} "
                    "without progress: resuming keeps failing validation, so aborting")
        return None
    if diagnosis.rule_id == "megatron-rerun-16":
        moved = [a for a in same_step if a.node != node
                 and (16 in a.exit_codes or a.rule == "megatron-rerun-16")]
        if moved:
            return (f"exit 16 at checkpoint step {step} again after moving from node "
                    f"{moved[-1].node} to {node}: the fault follows the data or the code, "
                    "not the GPU")
    return None
