"""``resched validate``, ``lint``, ``templates`` and ``init``: thin commands over the library.

``lint`` prints findings on stdout (they are its product) in the design's text form or as
JSON; ``validate`` prints ``valid`` on stdout and the findings on stderr. Both exit 1 when
lint reports an error; warnings alone exit 0 unless ``--strict``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from workflows.cli.common import FiniteFloat, ValuesCommand, bounded_int, path_kind, values_options
from workflows.errors import UsageError
from workflows.lint import Finding, LintOptions
from workflows.lint.core import SEVERITIES, TARGETS

if TYPE_CHECKING:
    from workflows.pipeline import LoadedWorkflow

_target_option = click.option(
    "--target",
    type=click.Choice(TARGETS),
    default="osmo",
    show_default=True,
    help="Where the workflow will run (osmo flags file:// urls and plain paths).",
)


def _load(
    file: Path,
    values_files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    lint_options: LintOptions,
) -> LoadedWorkflow:
    from workflows.pipeline import load_workflow
    from workflows.values import ValueOptions

    values = ValueOptions(files=values_files, sets=sets, set_strings=set_strings)
    return load_workflow(file, values, lint_target=lint_options.target, lint_options=lint_options)


def summary(findings: Sequence[Finding]) -> str:
    counts = [(sum(f.severity == s for f in findings), s) for s in SEVERITIES]
    parts = [f"{n} {s}{'' if n == 1 else 's'}" for n, s in counts if n]
    return ", ".join(parts) if parts else "no findings"


def exit_status(findings: Sequence[Finding], *, strict: bool) -> int:
    if any(f.severity == "error" for f in findings):
        return 1
    return 1 if strict and any(f.severity == "warning" for f in findings) else 0


@click.command("validate", cls=ValuesCommand)
@values_options
@_target_option
def validate_command(
    file: Path,
    values_files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    target: str,
) -> None:
    """Render FILE, validate it as an OSMO v2 spec, and lint it."""
    from workflows.cli.findings import echo_findings

    job = _load(file, values_files, sets, set_strings, LintOptions(target=target))
    groups, tasks = job.spec.task_groups(), job.spec.all_tasks()
    click.echo(
        f"valid: {file}: workflow {job.spec.name}, {len(groups)} group(s), {len(tasks)} task(s); "
        f"lint: {summary(job.findings)}"
    )
    echo_findings(job.findings, str(file))
    raise click.exceptions.Exit(exit_status(job.findings, strict=False))


@click.command("lint", cls=ValuesCommand)
@values_options
@click.option(
    "--format", "output_format", type=click.Choice(["text", "json"]), default="text",
    show_default=True, help="text: one finding per block; json: a list of objects.",
)
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@click.option(
    "--pool-retry-limit", type=bounded_int(0), metavar="N",
    help="Declare the OSMO pool's max_retry_per_task (N > 0 silences RS004; 0 warns).",
)
@click.option(
    "--checkpoint-write-seconds", "checkpoint_write_s", type=FiniteFloat(0), metavar="S",
    help="How long one checkpoint takes to write; frequencies not above it are flagged.",
)
@_target_option
def lint_command(
    file: Path,
    values_files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    output_format: str,
    strict: bool,
    pool_retry_limit: int | None,
    checkpoint_write_s: float | None,
    target: str,
) -> None:
    """Check FILE for resilience mistakes before GPU hours are spent."""
    options = LintOptions(
        target=target, pool_retry_limit=pool_retry_limit, checkpoint_write_s=checkpoint_write_s
    )
    findings = _load(file, values_files, sets, set_strings, options).findings
    if output_format == "json":
        click.echo(json.dumps([f.to_json() for f in findings], indent=2))
    else:
        for finding in findings:
            click.echo(finding.format(str(file)))
        click.echo(f"{file}: {summary(findings)}", err=True)
    raise click.exceptions.Exit(exit_status(findings, strict=strict))


@click.command("templates")
def templates_command() -> None:
    """List the shipped workflow templates."""
    from workflows.templates_catalog import list_templates

    templates = list_templates()
    width = max((len(t.name) for t in templates), default=0)
    for template in templates:
        click.echo(f"{template.name:<{width}}  {template.description}")


@click.command("init")
@click.argument("name")
@click.argument("directory", type=click.Path(path_type=Path), callback=path_kind("dir"))
@click.option("--force", is_flag=True, help="Overwrite existing files (each is kept as .bak).")
@click.option("--script", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Start from your own training script instead of the example "
                   "(docs/your-training.md); it must checkpoint to /tmp/models.")
@click.option("--script-args", default="",
              help="Your script's flags, e.g. \"--output-dir /tmp/models\" (with --script).")
def init_command(name: str, directory: Path, force: bool, script: Path | None,
                 script_args: str) -> None:
    """Copy the shipped template NAME (and the files it uploads) into DIRECTORY."""
    from workflows.templates_catalog import VALUES_NAME, init_template

    if script_args and script is None:
        raise UsageError("--script-args needs --script", fix="add --script PATH, or drop --script-args")
    result = init_template(name, directory, force=force, script=script, script_args=script_args)
    for backup in result.backups:
        click.echo(f"kept the old file as {backup}", err=True)
    for path in result.written:
        click.echo(f"wrote {path}")
    values = f" -f {directory / VALUES_NAME}" if script is not None else ""
    click.echo(f"next: resched run {directory / 'train.yaml'}{values}   # on this machine", err=True)
    click.echo(
        f"      resched lint {directory / 'train.yaml'}{values} --set upload_location=s3://BUCKET/RUN "
        "--set image=REGISTRY/resched-pytorch:TAG",
        err=True,
    )


COMMANDS: list[click.Command] = [validate_command, lint_command, templates_command, init_command]
