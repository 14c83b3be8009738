"""Node exclusion where the orchestrator cannot be told: leave a node an earlier attempt
excluded.

Slurm takes an excluded-node list on requeue; OSMO reschedules a task from the same spec
and may place it on the very node that failed it (a RESCHEDULE exit action carries no
node). The history travels with the checkpoint, so a task that starts on a node the
history marked for exclusion (a hardware fault, Megatron exit 16, a straggler report,
a node that failed twice) knows it before the training starts: it leaves at once with
the reschedule code, spending no failure budget, and the orchestrator places it again.

A pool may have no other node to offer: after ``MAX_GUARD_EXITS`` guard exits in a row
the training runs on the excluded node anyway (with a warning), rather than bouncing
until the orchestrator's retry limit ends the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wrapper.history import History

GUARD_RULE = "node-excluded"
GUARD_CATEGORY = "excluded-node"
MAX_GUARD_EXITS = 3


@dataclass(frozen=True)
class GuardVerdict:
    leave: bool
    reason: str  # empty when the node is not excluded


def excluded_nodes(history: History) -> dict[str, str]:
    """node -> the rule that excluded it, from every recorded attempt."""
    excluded: dict[str, str] = {}
    for record in history.attempts:
        if record.get("rule") == GUARD_RULE:
            continue
        why = str(record.get("rule") or "an earlier failure")
        node = record.get("node")
        if record.get("exclude_node") is True and isinstance(node, str) and node:
            excluded.setdefault(node, why)
        for other in _listed(record.get("exclude_nodes")):  # e.g. a straggler report
            excluded.setdefault(other, why)
    return excluded


def _listed(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str) and v] if isinstance(value, list) else []


def guard(history: History, node: str) -> GuardVerdict:
    why = excluded_nodes(history).get(node)
    if why is None:
        return GuardVerdict(False, "")
    recent = _trailing_guard_exits(history.attempts, node)
    if recent >= MAX_GUARD_EXITS:
        return GuardVerdict(False, (
            f"node {node} was excluded ({why}), but the orchestrator placed the task on it "
            f"{recent} times in a row: running the training here anyway"))
    return GuardVerdict(True, (
        f"node {node} was excluded by an earlier attempt ({why}): leaving before the "
        "training starts so the orchestrator places the task elsewhere; no budget spent"))


def _trailing_guard_exits(attempts: tuple[Mapping[str, Any], ...], node: str) -> int:
    count = 0
    for record in reversed(attempts):
        if record.get("rule") != GUARD_RULE or record.get("node") != node:
            break
        count += 1
    return count
