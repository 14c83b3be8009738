"""OSMO's runtime rules as pure functions (reference sections 5 and 6).

Kept apart from the process handling so that each rule is tested on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from workflows.backends.local.plan import PlannedTask

COMPLETE, FAIL, RESCHEDULE = "COMPLETE", "FAIL", "RESCHEDULE"


@dataclass(frozen=True)
class ExitDecision:
    """What OSMO does with a task's exit code."""

    action: str  # COMPLETE | FAIL | RESCHEDULE
    matched: str | None  # the exitActions entry that matched (None: default 0/non-0 rule)
    note: str = ""  # why a RESCHEDULE was not applied


def exit_decision(task: PlannedTask, code: int, *, retry_id: int, max_retry_per_task: int) -> ExitDecision:
    """First matching exitActions entry; RESCHEDULE only while retry_id < the limit."""
    matched = task.exit_action(code)
    note = ""
    if matched == RESCHEDULE and retry_id >= max_retry_per_task:
        note = (
            f"RESCHEDULE for exit {code} skipped: retry limit {max_retry_per_task} reached "
            f"(retry_id {retry_id}; set --max-retry-per-task). Note: OSMO's default pool "
            "max_retry_per_task is 0, so there RESCHEDULE is skipped unless the pool sets it"
        )
        matched = None
    if matched is not None:
        return ExitDecision(action=matched, matched=matched, note=note)
    return ExitDecision(action=COMPLETE if code == 0 else FAIL, matched=None, note=note)


@dataclass(frozen=True)
class Reaction:
    """How a task's exit moves its group (section 6)."""

    task_status: str  # COMPLETED | FAILED | RESCHEDULED
    new_pod: bool = False  # the task runs again in a new pod (inputs downloaded again)
    restart_others: bool = False  # every other task is stopped and run again in place
    group_status: str | None = None  # the group ends now with this status
    reason: str = ""


def group_reaction(*, is_lead: bool, action: str, ignore_nonlead_status: bool) -> Reaction:
    if action == RESCHEDULE:
        if is_lead:
            return Reaction("RESCHEDULED", new_pod=True, restart_others=True,
                            reason="lead rescheduled: every other task restarts")
        if ignore_nonlead_status:
            return Reaction("RESCHEDULED", new_pod=True,
                            reason="non-lead rescheduled alone (ignoreNonleadStatus: true)")
        return Reaction("RESCHEDULED", new_pod=True, restart_others=True,
                        reason="non-lead rescheduled: barrier reset, every task restarts "
                        "(ignoreNonleadStatus: false)")
    status = "COMPLETED" if action == COMPLETE else "FAILED"
    if is_lead:
        return Reaction(status, group_status=status,
                        reason=f"lead {status.lower()}: the other tasks take its status")
    if status == "FAILED" and not ignore_nonlead_status:
        return Reaction(status, group_status="FAILED",
                        reason="non-lead failed: the group fails (ignoreNonleadStatus: false)")
    if status == "FAILED":
        return Reaction(status, reason="non-lead failure ignored (ignoreNonleadStatus: true)")
    return Reaction(status, reason="non-lead completed")
