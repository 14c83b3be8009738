"""``resched submit --backend local|osmo|slurm FILE [values] [backend options]``.

Thin: the backend flags come from each backend's option table; the pipeline
(:func:`workflows.pipeline.prepare_request`) loads, lints, checks the DAG and makes the
pure dry run; this command prints / writes the request (``--dry-run``, ``--output``) or
hands it over (``submit``, the only side effect).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from workflows.backends import BACKEND_NAMES, get_backend
from workflows.backends.options import click_options
from workflows.cli.common import ValuesCommand, bounded_int, path_kind, values_options
from workflows.cli.findings import echo_findings
from workflows.errors import UsageError
from workflows.pipeline import prepare_request
from workflows.values import ValueOptions

BACKEND_OPTIONS = {name: get_backend(name).options for name in BACKEND_NAMES}


@click.command("submit", cls=ValuesCommand)
@values_options
@click.option(
    "--backend",
    "backend_name",
    type=click.Choice(BACKEND_NAMES),
    default="local",
    show_default=True,
    help="Where the workflow runs.",
)
@click.option("--dry-run", is_flag=True, help="Print the exact request instead of submitting it.")
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    callback=path_kind("dir"),
    help="Write the request's files (e.g. workflow.yaml, the sbatch script) to this directory.",
)
@click.option("--show-spec", is_flag=True,
              help="With --dry-run: print the whole request even when it is long (OSMO).")
@click.option("--strict", is_flag=True, help="Refuse to submit when lint reports warnings.")
@click.option(
    "--pool-retry-limit",
    type=bounded_int(0),
    help="Declare the OSMO pool's max_retry_per_task (lint RS004).",
)
@click_options(BACKEND_OPTIONS)
def submit_command(
    file: Path,
    values_files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    backend_name: str,
    dry_run: bool,
    output: Path | None,
    show_spec: bool,
    strict: bool,
    pool_retry_limit: int | None,
    **given: Any,
) -> None:
    """Validate, lint and submit FILE to a backend (local runs it here)."""
    backend = get_backend(backend_name)
    request = prepare_request(
        file,
        ValueOptions(files=values_files, sets=sets, set_strings=set_strings),
        backend,
        {k: v for k, v in given.items() if v is not None},
        strict=strict,
        pool_retry_limit=pool_retry_limit,
        show_findings=lambda findings: echo_findings(findings, str(file)),
    )
    written = request.write(output) if output is not None else []
    if dry_run and request.long_request and not show_spec:
        written = written or request.write(dry_run_dir(file))
        click.echo(request.brief(written))
        return
    for path in written:
        click.echo(f"wrote {path}", err=True)
    if dry_run:
        click.echo(request.materialize())
        return
    result = backend.submit(request)
    click.echo(result.message)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


def dry_run_dir(file: Path) -> Path:
    """Where ``--dry-run`` writes a long request without ``--output``: a new folder under
    ``.resched/dry-run/`` (never an existing one: nothing is overwritten)."""
    base = Path(".resched") / "dry-run"
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for index in range(1000):
        candidate = base / (f"{file.stem}-{stamp}" + (f"-{index}" if index else ""))
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            continue
        return candidate
    raise UsageError("cannot find a free folder for the dry run", where=str(base),
                     fix="pass --output DIR")


COMMANDS: list[click.Command] = [submit_command]
