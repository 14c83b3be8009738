"""Resilience lint: the mistakes that cost GPU hours on OSMO, found before submitting.

Each rule is a small function in one module per family (checkpoints, exit codes, wrap
codes, groups, files, source text) that yields :class:`Finding` objects; ``RULES``
lists them all. ``lint_workflow`` runs every rule and sorts the findings by severity
then source line.

  RS001 warning  a task of the checkpoint's group lacks the checkpoint (url/<basename>) as an input
  RS002 error    file:// or plain-path url in inputs/outputs/checkpoint (target osmo only)
  RS003 warning  only non-lead tasks write a checkpoint
  RS004 info     RESCHEDULE needs the pool's max_retry_per_task > 0 (warning when declared 0)
  RS005 warning  exit codes under two actions (the first listed wins silently)
  RS006 varies   RESCHEDULE on 0, 1, 16, 17, 93 or a signal code (137/143: info)
  RS007 error    codes above 255 that are not OSMO's own (warning for a range reaching there)
  RS008 error    `resched wrap` reschedule code not under the task's RESCHEDULE (default 3: warning)
  RS009 error    `resched wrap` abort code is a RESCHEDULE code
  RS010 warning  multi-task group with ignoreNonleadStatus true (info without RESCHEDULE)
  RS011 warning  more than 20 tasks (OSMO's default max_num_tasks)
  RS012 warning  checkpoint frequency below 30 s, or not above --checkpoint-write-seconds
  RS013 error    a runtime token with spaces (`{{ workflow_id }}`) in the source
  RS014 error    `{#` outside `{% raw %}` (e.g. ${#arr[@]}) in the source
  RS015 error    a localpath file that does not exist (relative to the spec's folder)
  RS016 warning  RESCHEDULE but nothing in the group checkpoints (and wrap owns no store)
  RS017 warning  COMPLETE on 1 or a signal code: a crash would count as success
  RS018 warning  the task's checkpoint path does not cover resched wrap's --checkpoint-dir
  RS019 warning  resched wrap in an image that does not say it has resched (target osmo)
  RS040 warning  in-process restart: collective timeout >= soft_timeout, or --hang-timeout
                 shorter than one restart (hard + barrier timeout)
  RS041 warning  in-process restart without a launcher and without MASTER_ADDR/MASTER_PORT
"""

from __future__ import annotations

from workflows.errors import UsageError
from workflows.lint import checkpoints, exit_codes, files, groups, image, inprocess, text, wrap
from workflows.lint.core import (
    SEVERITIES,
    TARGETS,
    Finding,
    LintContext,
    LintOptions,
    RenderedLike,
    Rule,
    Severity,
)
from workflows.spec import Workflow

__all__ = [
    "RULES",
    "RULE_IDS",
    "Finding",
    "LintOptions",
    "Severity",
    "has_errors",
    "lint_workflow",
]

RULES: tuple[Rule, ...] = (
    *checkpoints.RULES,
    *files.RULES,
    *exit_codes.RULES,
    *wrap.RULES,
    *image.RULES,
    *groups.RULES,
    *text.RULES,
    *inprocess.RULES,
)
RULE_IDS: tuple[str, ...] = tuple(
    sorted({rule.__name__.split("_", 1)[0].upper() for rule in RULES})
)


def lint_workflow(rendered: RenderedLike, spec: Workflow, options: LintOptions) -> list[Finding]:
    """All findings for ``spec`` (rendered from ``rendered``), most severe first."""
    if options.target not in TARGETS:
        raise UsageError(
            f"unknown lint target {options.target!r}",
            fix=f"use one of {', '.join(TARGETS)}",
        )
    ctx = LintContext(rendered, spec, options)
    findings = [finding for rule in RULES for finding in rule(ctx)]
    return sorted(
        findings,
        key=lambda f: (SEVERITIES.index(f.severity), f.line if f.line is not None else 0, f.id),
    )


def has_errors(findings: list[Finding] | tuple[Finding, ...]) -> bool:
    return any(f.severity == "error" for f in findings)
