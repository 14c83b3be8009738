"""``resched submit --backend local|osmo|slurm FILE [values] [backend options]``.

Thin: load (render + validate + lint) -> the backend's pure dry run -> print / write the
request (``--dry-run``, ``--output``) or hand it over (``submit``, the only side effect).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from workflows.backends import BACKEND_NAMES, get_backend
from workflows.cli.common import (
    NameParam,
    SlurmTimeParam,
    ValuesCommand,
    bounded_int,
    path_kind,
    values_options,
)
from workflows.cli.findings import echo_findings
from workflows.errors import UsageError
from workflows.lint import LintOptions
from workflows.pipeline import load_workflow
from workflows.values import ValueOptions

# click parameter name -> the flag a user typed (for messages); the backend's
# ``option_help`` says which of these it takes.
_BACKEND_FLAGS = {
    "pool": "--pool",
    "priority": "--priority",
    "partition": "--partition",
    "time": "--time",
    "account": "--account",
    "tasks_per_node": "--tasks-per-node",
    "grace": "--grace",
    "max_retry_per_task": "--max-retry-per-task",
    "chaos": "--chaos",
    "workdir": "--workdir",
    "report": "--report",
}


def backend_options(given: dict[str, Any], backend_name: str, accepted: set[str]) -> dict[str, Any]:
    """Keep the options the user set; refuse one the backend does not take."""
    chosen = {k: v for k, v in given.items() if v is not None}
    for key in chosen:
        if key not in accepted:
            takes = ", ".join(sorted(_BACKEND_FLAGS[k] for k in accepted)) or "no options"
            raise UsageError(
                f"{_BACKEND_FLAGS[key]} is not an option of the {backend_name} backend",
                fix=f"the {backend_name} backend takes {takes}",
            )
    return chosen


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
@click.option("--strict", is_flag=True, help="Refuse to submit when lint reports warnings.")
@click.option(
    "--pool-retry-limit",
    type=bounded_int(0),
    help="Declare the OSMO pool's max_retry_per_task (lint RS004).",
)
@click.option("--pool", type=NameParam(), help="[osmo] Pool to submit to.")
@click.option(
    "--priority", type=click.Choice(["HIGH", "NORMAL", "LOW"], case_sensitive=False), help="[osmo]"
)
@click.option("--partition", type=NameParam(), help="[slurm] Partition.")
@click.option("--time", type=SlurmTimeParam(), help="[slurm] Time limit (sbatch --time).")
@click.option("--account", type=NameParam(), help="[slurm] Account.")
@click.option("--tasks-per-node", type=bounded_int(1), help="[slurm] Tasks sharing a node.")
# Slurm keeps the --signal warning time in 16 bits: at most 65535 s.
@click.option("--grace", type=bounded_int(1, 65535), help="[slurm] Seconds of warning before the time limit.")
@click.option(
    "--max-retry-per-task",
    type=bounded_int(0),
    help="[local, slurm] How many RESCHEDULEs a task gets (OSMO's pool setting).",
)
@click.option("--chaos", help="[local] Fault injection spec, e.g. 'kill:master@20s'.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    callback=path_kind("dir"),
    help="[local, slurm] Where pods, task dirs and logs go.",
)
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), callback=path_kind("file"),
              help="[local] JSON report.")
def submit_command(
    file: Path,
    values_files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    backend_name: str,
    dry_run: bool,
    output: Path | None,
    strict: bool,
    pool_retry_limit: int | None,
    **given: Any,
) -> None:
    """Validate, lint and submit FILE to a backend (local runs it here)."""
    backend = get_backend(backend_name)
    options = backend_options(given, backend_name, set(backend.option_help))
    job = load_workflow(
        file,
        ValueOptions(files=values_files, sets=sets, set_strings=set_strings),
        lint_options=LintOptions(target=backend.lint_target, pool_retry_limit=pool_retry_limit),
    )
    echo_findings(job.findings, str(file))
    blocking = [f for f in job.findings if f.severity == "error" or (strict and f.severity == "warning")]
    if blocking:
        raise UsageError(
            f"refusing to submit: lint reported {len(blocking)} blocking finding(s)",
            where=str(file),
            fix="fix the findings above (resched lint shows them again)",
        )
    request = backend.dry_run(job, options)
    if output is not None:
        for path in request.write(output):
            click.echo(f"wrote {path}", err=True)
    if dry_run:
        click.echo(request.materialize())
        return
    result = backend.submit(request)
    click.echo(result.message)
    if result.exit_code:
        raise click.exceptions.Exit(result.exit_code)


COMMANDS: list[click.Command] = [submit_command]
