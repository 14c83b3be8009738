"""``resched run FILE [values] [local backend options] [--html FILE]``: the local executor.

Thin: the flags come from the local backend's option table; the pipeline
(:func:`workflows.pipeline.prepare_request`) loads, lints, checks the DAG and makes the
plan (the same as ``resched submit --backend local``); ``submit`` runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from workflows.backends import get_backend
from workflows.backends.local import LocalPlan
from workflows.backends.options import click_options
from workflows.cli.common import ValuesCommand, values_options
from workflows.cli.findings import echo_findings
from workflows.pipeline import prepare_request
from workflows.values import ValueOptions


@click.command("run", cls=ValuesCommand)
@values_options
@click_options({"local": get_backend("local").options}, tag=False)
@click.option("--html", "html_path", type=click.Path(path_type=Path),
              help="Also write the HTML run report (timeline per task, ETTR) here.")
@click.option("--dry-run", is_flag=True, help="Print the plan instead of running it.")
def run_command(file: Path, values_files: tuple[Path, ...], sets: tuple[str, ...],
                set_strings: tuple[str, ...], dry_run: bool, html_path: Path | None,
                **options: Any) -> None:
    """Run FILE on this machine with OSMO's runtime semantics (the local executor)."""
    backend = get_backend("local")
    request = prepare_request(
        file, ValueOptions(files=values_files, sets=sets, set_strings=set_strings), backend,
        {k: v for k, v in options.items() if v is not None}, verb="run",
        show_findings=lambda findings: echo_findings(findings, str(file)),
    )
    if dry_run:
        click.echo(request.materialize(), nl=False)
        return
    if html_path is not None:  # a bad --html path is refused before the run, not after it
        from workflows.report.write import check_target

        check_target(html_path)
    result = backend.submit(request)
    click.echo(result.message)
    if html_path is not None:
        from workflows.cli.report_cmd import write_run_html

        assert isinstance(request, LocalPlan)
        write_run_html(request.workdir, html_path)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


COMMANDS: list[click.Command] = [run_command]
