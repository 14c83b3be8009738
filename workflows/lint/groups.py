"""Rules on groups and workflow size."""

from __future__ import annotations

from collections.abc import Iterator

from workflows.lint.core import Finding, LintContext

OSMO_DEFAULT_MAX_TASKS = 20


def rs010_ignore_nonlead_status(ctx: LintContext) -> Iterator[Finding]:
    """With ignoreNonleadStatus true a non-lead's reschedule or failure leaves the others waiting."""
    for index, group in enumerate(ctx.spec.groups or ()):
        if len(group.tasks) < 2 or not group.ignoreNonleadStatus:
            continue
        explicit = "ignoreNonleadStatus" in group.model_fields_set
        path = f"workflow.groups[{index}]" + (".ignoreNonleadStatus" if explicit else "")
        said = "sets ignoreNonleadStatus: true" if explicit else (
            "leaves ignoreNonleadStatus unset, and OSMO's default is true"
        )
        reschedules = any("RESCHEDULE" in t.exitActions for t in group.tasks)
        yield ctx.finding(
            "RS010", "warning" if reschedules else "info", path,
            f"group {group.name} has {len(group.tasks)} tasks and {said}: "
            + (
                "when a non-lead task reschedules only it gets a new pod, so the others wait "
                "in a broken rendezvous (and a failed non-lead is ignored)"
                if reschedules
                else "a failed non-lead task is ignored, so a distributed training would wait "
                "for it in a broken rendezvous"
            ),
            f"set `ignoreNonleadStatus: false` on group {group.name} so the whole group restarts",
        )


def rs011_too_many_tasks(ctx: LintContext) -> Iterator[Finding]:
    count = len(ctx.sites)
    if ctx.options.target != "osmo" or count <= OSMO_DEFAULT_MAX_TASKS:
        return
    yield ctx.finding(
        "RS011", "warning", "workflow",
        f"the workflow has {count} tasks; OSMO's default max_num_tasks is "
        f"{OSMO_DEFAULT_MAX_TASKS}, so the submit is refused unless the admin raised it",
        f"use at most {OSMO_DEFAULT_MAX_TASKS} tasks (more GPUs per task), or check the "
        "pool's max_num_tasks",
    )


RULES = (rs010_ignore_nonlead_status, rs011_too_many_tasks)
