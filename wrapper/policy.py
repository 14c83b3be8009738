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
7. reschedule while the failure-reschedule budget lasts, then abort.

Budgets count failures since the checkpoint last advanced (``reset_on_progress``), so
a long run that keeps making progress is never aborted for a few scattered faults.
Node memory: a hardware rule, Megatron exit 16, ExcludeThisNode, or a node that failed
the task twice marks the node for exclusion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wrapper.classify import Diagnosis
from wrapper.history import History, attempt_step, is_failure

NODE_FAILURES_TO_EXCLUDE = 2


@dataclass(frozen=True)
class Budgets:
    max_retries: int = 3
    max_reschedules: int = 2
    reset_on_progress: bool = True
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str
    backoff_s: float
    exclude_node: bool
    retries_left: int
    reschedules_left: int


@dataclass(frozen=True)
class _Counts:
    window: tuple[Mapping[str, Any], ...]  # failures since the checkpoint last advanced
    retries_used: int
    reschedules_used: int


def _counts(history: History, budgets: Budgets, allocation: str, step: int | None,
            retries_used_in_allocation: int) -> _Counts:
    failures = [a for a in history.attempts if is_failure(a)]

    def retries_in(attempts: list[Mapping[str, Any]]) -> int:
        return sum(1 for a in attempts if a.get("allocation") == allocation and a.get("decision") == "retry")

    recorded = retries_in(failures)
    if budgets.reset_on_progress and step is not None:
        failures = [a for a in failures if _step_or_minus_one(a) >= step]
    # the caller's count may include restarts the history does not hold (ft_launcher's
    # in-job restarts): they count too, but only the recorded ones can be reset
    unrecorded = max(0, retries_used_in_allocation - recorded)
    if budgets.reset_on_progress:
        retries = retries_in(failures) + unrecorded
    else:
        retries = max(recorded, retries_used_in_allocation)
    reschedules = sum(1 for a in failures if a.get("decision") == "reschedule")
    return _Counts(window=tuple(failures), retries_used=retries, reschedules_used=reschedules)


def _step_or_minus_one(attempt: Mapping[str, Any]) -> int:
    step = attempt_step(attempt)
    return -1 if step is None else step


def _summary(diagnosis: Diagnosis) -> str:
    """The first sentence of the hint: what happened, in words."""
    hint = diagnosis.hint.strip()
    for stop in (". ", ": "):
        if stop in hint:
            hint = hint.split(stop, 1)[0]
    return hint.rstrip(".") or diagnosis.category


def _deterministic_repeat(diagnosis: Diagnosis, window: Sequence[Mapping[str, Any]], node: str,
                          step: int | None) -> str | None:
    if not diagnosis.deterministic or step is None:
        return None
    same = [a for a in window if a.get("rule") == diagnosis.rule_id and attempt_step(a) == step]
    node_suspect = diagnosis.escalate is not None and diagnosis.escalate.scope == "node"
    elsewhere = [a for a in same if a.get("node") != node]
    if elsewhere:
        return (f"the same failure already happened at checkpoint step {step} on node "
                f"{elsewhere[-1].get('node')}: it reproduces, so it is not the node")
    if same and not node_suspect:
        return f"the same failure already happened at checkpoint step {step}: it reproduces"
    return None


def _escalation(diagnosis: Diagnosis, window: Sequence[Mapping[str, Any]], node: str) -> tuple[str, str] | None:
    rule = diagnosis.escalate
    if rule is None or diagnosis.decision != "retry":
        return None
    earlier = [a for a in window if a.get("rule") == diagnosis.rule_id
               and (rule.scope == "job" or a.get("node") == node)]
    if len(earlier) < rule.after:
        return None
    where = " on this node" if rule.scope == "node" else ""
    return rule.to, f"seen {len(earlier)} time(s) before{where}, so escalated to {rule.to}"


def decide(diagnosis: Diagnosis, history: History, budgets: Budgets, *, node: str, allocation: str,
           step: int | None, retries_used_in_allocation: int) -> Decision:
    counts = _counts(history, budgets, allocation, step, retries_used_in_allocation)
    retries_left = max(0, budgets.max_retries - counts.retries_used)
    reschedules_left = max(0, budgets.max_reschedules - counts.reschedules_used)
    head = f"rule {diagnosis.rule_id} ({diagnosis.category}): {_summary(diagnosis)}"

    def done(action: str, why: str, *, backoff: float = 0.0, spend: bool = True) -> Decision:
        exclude, node_note = _node_exclusion(diagnosis, history, node, spend)
        r_left = retries_left - (1 if action == "retry" and spend else 0)
        s_left = reschedules_left - (1 if action == "reschedule" and spend else 0)
        budget_note = (f"retries left {r_left}/{budgets.max_retries}, "
                       f"reschedules left {s_left}/{budgets.max_reschedules}")
        parts = [f"{head} -> {action}", why, node_note, budget_note if action != "complete" else ""]
        return Decision(action=action, reason="; ".join(p for p in parts if p), backoff_s=backoff,
                        exclude_node=exclude, retries_left=r_left, reschedules_left=s_left)

    if diagnosis.decision == "complete":
        return done("complete", "", spend=False)
    if not diagnosis.counts_as_failure:
        return done(diagnosis.decision, "not a failure: no budget spent", spend=False)
    if diagnosis.decision == "abort":
        return done("abort", "retrying cannot help")
    megatron = megatron_over_time(diagnosis, counts.window, node, step)
    if megatron:
        return done("abort", megatron)
    repeat = _deterministic_repeat(diagnosis, counts.window, node, step)
    if repeat:
        return done("abort", f"{repeat}; aborting early instead of burning budgets")
    action, why = diagnosis.decision, ""
    escalated = _escalation(diagnosis, counts.window, node)
    if escalated:
        action, why = escalated
    if action == "retry":
        if retries_left > 0:
            backoff = min(budgets.backoff_max_s, budgets.backoff_base_s * (2 ** counts.retries_used))
            return done("retry", _join(why, f"retry in place in {backoff:g} s"), backoff=backoff)
        action, why = "reschedule", _join(why, f"in-place retries used up ({budgets.max_retries} in this allocation)")
    if action == "reschedule":
        if reschedules_left > 0:
            return done("reschedule", why)
        return done("abort", _join(why, f"reschedule budget used up ({budgets.max_reschedules} failure reschedules)"))
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


# ---- Megatron exits 16 / 17 over time (nvrx slice) ------------------------------------
# Megatron-LM users report resumes after exit 17 that crash again at the same iteration
# (NVIDIA/Megatron-LM issue tracker); the re-run state machine moves a 16 to another node
# precisely to tell the GPU from the data / code. So: exit 17 seen this many times before
# at the same checkpoint step (no progress in between) aborts; an exit 16 that comes back
# at the same step on a different node aborts (the fault followed the data or the code).
REPEATED_17_LIMIT = 3


def _exit_codes(attempt: Mapping[str, Any]) -> set[int]:
    codes = {attempt.get("exit_code")}
    ranks = attempt.get("rank_exit_codes")
    if isinstance(ranks, Mapping):
        codes.update(ranks.values())
    return {c for c in codes if isinstance(c, int)}


def megatron_over_time(diagnosis: Diagnosis, window: Sequence[Mapping[str, Any]], node: str,
                       step: int | None) -> str | None:
    """Why a Megatron 16 / 17 must abort now, from the earlier attempts; None to go on."""
    if step is None or not diagnosis.rule_id.startswith("megatron-rerun-1"):
        return None
    same_step = [a for a in window if attempt_step(a) == step]
    if diagnosis.rule_id.startswith("megatron-rerun-17"):
        earlier = [a for a in same_step if 17 in _exit_codes(a)]
        if len(earlier) >= REPEATED_17_LIMIT:
            return (f"exit 17 came back {len(earlier) + 1} times at checkpoint step {step} "
                    "without progress: resuming keeps failing validation, so aborting")
        return None
    if diagnosis.rule_id == "megatron-rerun-16":
        moved = [a for a in same_step if a.get("node") != node
                 and (16 in _exit_codes(a) or a.get("rule") == "megatron-rerun-16")]
        if moved:
            return (f"exit 16 at checkpoint step {step} again after moving from node "
                    f"{moved[-1].get('node')} to {node}: the fault follows the data or the code, "
                    "not the GPU")
    return None
