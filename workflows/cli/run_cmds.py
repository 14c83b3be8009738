"""``resched run FILE [values] [--chaos SPEC] [--max-retry-per-task N] [--workdir DIR] [--report FILE]``.

Thin: load the workflow for the local target, print lint findings, hand it to the
local backend (the same one ``resched submit --backend local`` uses), print its line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from workflows.backends import get_backend
from workflows.cli.common import ValuesCommand, bounded_int, path_kind, values_options
from workflows.cli.findings import echo_findings
from workflows.errors import UsageError
from workflows.pipeline import load_workflow
from workflows.values import ValueOptions


@click.command("run", cls=ValuesCommand)
@values_options
@click.option("--chaos", help="Inject faults: 'kill:master@20s,hang:worker_1@35s,"
              "exit:master=16@50s,term:master@70s', '@3ckpt', or 'random:mtbf=30s,seed=1'.")
@click.option("--max-retry-per-task", type=bounded_int(0),
              help="RESCHEDULEs each task gets (default 3; OSMO's pool default is 0).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), callback=path_kind("dir"),
              help="Where pods, logs and staged inputs go (default .resched/runs/<run id>).")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), callback=path_kind("file"),
              help="Write the JSON report (attempts, timeline, ETTR) here.")
@click.option("--progress", type=click.Choice(["auto", "tty", "plain", "quiet"]), default="auto",
              show_default=True, help="Live lines on a terminal, plain lines otherwise.")
@click.option("--dry-run", is_flag=True, help="Print the plan instead of running it.")
def run_command(file: Path, values_files: tuple[Path, ...], sets: tuple[str, ...],
                set_strings: tuple[str, ...], dry_run: bool, **options: Any) -> None:
    """Run FILE on this machine with OSMO's runtime semantics (the local executor)."""
    backend = get_backend("local")
    job = load_workflow(file, ValueOptions(files=values_files, sets=sets, set_strings=set_strings),
                        lint_target=backend.lint_target)
    echo_findings(job.findings, str(file))
    if job.errors:
        raise UsageError(f"refusing to run: lint reported {len(job.errors)} error(s)", where=str(file),
                         fix="fix the findings above (resched lint shows them again)")
    request = backend.dry_run(job, {k: v for k, v in options.items() if v is not None})
    if dry_run:
        click.echo(request.materialize(), nl=False)
        return
    result = backend.submit(request)
    click.echo(result.message)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


COMMANDS: list[click.Command] = [run_command]
