"""Printing lint findings: shared by lint, validate, submit and run."""

from __future__ import annotations

from collections.abc import Sequence

import click

from workflows.lint import Finding


def echo_findings(findings: Sequence[Finding], source: str) -> None:
    """Findings go to stderr so that stdout stays the command's product."""
    for finding in findings:
        click.echo(finding.format(source), err=True)
