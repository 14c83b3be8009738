"""``resched report RUN_DIR [--html FILE] [--baseline RUN_DIR] [--json]``.

Thin: load the run's report (recomputing its numbers), optionally compare with a
fault-free run, print the text report, write the HTML page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


@click.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--html", "html_path", type=click.Path(path_type=Path),
              help="Write one self-contained HTML page (timeline per task, ETTR) here.")
@click.option("--baseline", type=click.Path(path_type=Path),
              help="A fault-free run of the same workflow (the same `resched run` without --chaos): "
                   "the upper bound this run's ETTR is compared with.")
@click.option("--json", "as_json", is_flag=True, help="Print the recomputed report as JSON.")
def report_command(run_dir: Path, html_path: Path | None, baseline: Path | None, as_json: bool) -> None:
    """Show the report of a finished `resched run` (RUN_DIR is its --workdir or report.json)."""
    from workflows.backends.local.summary import report_lines
    from workflows.report.load import add_baseline, load_report

    report = load_report(run_dir)
    if baseline is not None:
        add_baseline(report, baseline)
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
    else:
        for line in report_lines(report)[1:]:
            click.echo(line)
        click.echo(report["summary"])
    if html_path is not None:
        _write(report, html_path)


def _write(report: dict[str, Any], html_path: Path) -> None:
    from workflows.report.html import render_html
    from workflows.report.write import write_html

    click.echo(f"html: {write_html(html_path, render_html(report))}", err=True)


def write_run_html(run_dir: Path, html_path: Path) -> None:
    """``resched run --html FILE``: the page of the run that just ended."""
    from workflows.report.load import load_report

    _write(load_report(run_dir), html_path)


COMMANDS: list[click.Command] = [report_command]
