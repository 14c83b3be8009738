"""Rules pairing `resched wrap`'s exit codes with the task's exitActions (design: decisions)."""

from __future__ import annotations

from collections.abc import Iterator

from workflows.lint.core import Finding, LintContext, TaskSite
from workflows.lint.wrap_scan import WrapCall, task_wrap_calls


def _codes_text(site: TaskSite, action: str) -> str:
    codes = site.task.exitActions.get(action)
    return f"{action}: {codes}" if codes is not None else f"no {action} action"


def _how(call: WrapCall, kind: str) -> str:
    flag = f"--{kind}-code"
    return {
        "flag": f"{flag} {getattr(call, kind + '_code')}",
        "env": f"RESCHED_{kind.upper()}_CODE={getattr(call, kind + '_code')}",
        "default": f"the default {flag} {getattr(call, kind + '_code')}",
    }[getattr(call, kind + "_from")]


def rs008_wrap_code_not_rescheduled(ctx: LintContext) -> Iterator[Finding]:
    """The wrapper's reschedule exit must be a RESCHEDULE code, or OSMO marks the task FAILED."""
    for site in ctx.sites:
        for call in task_wrap_calls(ctx, site):
            code = call.reschedule_code
            if code is None:
                continue
            action = site.task.exit_action(code)
            if action == "RESCHEDULE":
                continue
            if action is not None:
                why = f"exit {code} matches {action} first ({_codes_text(site, action)})"
            else:
                why = f"{code} is not under the task's RESCHEDULE ({_codes_text(site, 'RESCHEDULE')})"
            severity = "warning" if call.reschedule_from == "default" else "error"
            yield ctx.finding(
                "RS008", severity, call.where,  # type: ignore[arg-type]
                f"task {site.task.name} runs resched wrap with {_how(call, 'reschedule')}, but "
                f"{why}: its reschedule decisions would end the task as FAILED",
                f"add {code} to RESCHEDULE under the exitActions of task {site.task.name}"
                + (f" and remove it from {action}" if action else "")
                + ", or pass a --reschedule-code that is under RESCHEDULE",
            )


def rs009_abort_code_reschedules(ctx: LintContext) -> Iterator[Finding]:
    """An abort that OSMO reschedules burns GPU hours on a failure retrying cannot fix."""
    for site in ctx.sites:
        for call in task_wrap_calls(ctx, site):
            code = call.abort_code
            if code is None or site.task.exit_action(code) != "RESCHEDULE":
                continue
            yield ctx.finding(
                "RS009", "error", call.where,
                f"task {site.task.name} runs resched wrap with {_how(call, 'abort')}, but exit "
                f"{code} is a RESCHEDULE code ({_codes_text(site, 'RESCHEDULE')}): every abort "
                "would be rescheduled",
                f"pass an --abort-code that is not under RESCHEDULE (e.g. --abort-code 1), or "
                f"remove {code} from RESCHEDULE",
            )


RULES = (rs008_wrap_code_not_rescheduled, rs009_abort_code_reschedules)
