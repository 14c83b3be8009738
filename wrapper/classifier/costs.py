"""What each wrong decision costs, written down once (docs/rules.md, "Costs").

``COST[(right, chosen)]``: the price of deciding ``chosen`` when ``right`` was the
right decision, in "one wasted restart" units (a restart of the entrypoint: process
start, ``import torch``, checkpoint load, the steps since the last checkpoint). The
judge applies the table where the evidence leaves two readings open
(:func:`least_regret`), and benchmarks/classify_accuracy.py scores with the same table.

The two catastrophic mistakes (never to be made, whatever else is gained):
- abort of a failure a restart fixes: the job stops, GPUs sit idle until a person
  notices and resubmits (hours, the queue position lost);
- complete of a run that failed or stopped early: nobody restarts it, the model is
  silently unfinished (the most expensive mistake: found days later, if ever).
"""

from __future__ import annotations

from collections.abc import Iterable

from wrapper.decision import Decision

C, R, S, A = Decision.COMPLETE, Decision.RETRY, Decision.RESCHEDULE, Decision.ABORT

COST: dict[tuple[Decision, Decision], float] = {
    # right: complete (the training finished)
    (C, C): 0, (C, R): 1, (C, S): 2, (C, A): 5,
    # right: retry in place (a transient failure)
    (R, C): 100, (R, R): 0, (R, S): 2, (R, A): 50,
    # right: reschedule (this node is bad, or a preemption / graceful stop)
    (S, C): 100, (S, R): 4, (S, S): 0, (S, A): 50,
    # right: abort (deterministic: the same code and inputs fail again)
    (A, C): 100, (A, R): 3, (A, S): 4, (A, A): 0,
}
CATASTROPHIC = frozenset(
    {(right, A) for right in (R, S)} | {(right, C) for right in (R, S, A)})
WORST = max(COST.values())


def cost(right: Decision | str, chosen: Decision | str) -> float:
    return COST[(Decision.parse(right), Decision.parse(chosen))]


def catastrophic(right: Decision | str, chosen: Decision | str) -> bool:
    return (Decision.parse(right), Decision.parse(chosen)) in CATASTROPHIC


def least_regret(readings: Iterable[Decision]) -> Decision:
    """Of the decisions the evidence supports, the one whose worst case costs least.

    E.g. a KeyError (abort) next to a rendezvous timeout (retry): aborting costs 50 if
    the timeout was the cause, retrying costs 3 if the KeyError was; retry. The repeat
    then aborts (the policy's deterministic-repeat rule), so the doubt costs one restart.
    """
    options = list(dict.fromkeys(readings))
    return min(options, key=lambda chosen: (max(COST[(right, chosen)] for right in options),
                                            options.index(chosen)))


# Rule categories of failures a restart may fix: start-up races (rendezvous, DNS, store
# connect), the network, remote services (model hubs, object stores), storage I/O. Their
# evidence next to an abort rule's makes the abort doubtful (see least_regret).
RESTART_MAY_FIX = frozenset({"rendezvous", "network", "transient-io", "remote-service",
                             "storage-io"})
