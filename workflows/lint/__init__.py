"""Resilience lint: the mistakes that cost GPU hours on OSMO, found before submitting.

Each rule is a small function in one module per family (checkpoints, exit codes, wrap
codes, groups, files, source text) that yields :class:`Finding` objects; ``RULES``
lists them all. ``lint_workflow`` runs every rule and sorts the findings by severity
then source line.
"""

from __future__ import annotations

from workflows.errors import UsageError
from workflows.lint import checkpoints, exit_codes, files, groups, text, wrap
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
    *groups.RULES,
    *text.RULES,
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
