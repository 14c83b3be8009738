"""``resched status JOB`` and ``resched logs JOB`` for jobs of the Slurm backend.

Thin: :mod:`workflows.backends.slurm.status` reads ``scontrol show job`` and the job's
files (no sacct needed); these commands print what it found.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from workflows.backends.slurm.status import log_files, read_job_status

_WORKDIR = click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The submit's --workdir (needed once Slurm has forgotten the job).",
)


@click.command("status")
@click.argument("job_id")
@_WORKDIR
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status_command(job_id: str, workdir: Path | None, as_json: bool) -> None:
    """State, restarts, every run's result and the last outcome record of Slurm job JOB_ID."""
    status = read_job_status(job_id, workdir=workdir)
    if as_json:
        payload = {
            "job_id": status.job_id,
            "state": status.state,
            "restarts": status.restarts,
            "excluded_nodes": status.scheduler.get("ExcNodeList"),
            "exit_code": status.scheduler.get("ExitCode"),
            "allocations": [asdict(a) for a in status.allocations],
            "last_outcome": status.last_outcome,
            "job_root": str(status.job_root) if status.job_root else None,
        }
        click.echo(json.dumps(payload, indent=2, default=str))
        return
    for line in status.lines():
        click.echo(line)


@click.command("logs")
@click.argument("job_id")
@_WORKDIR
@click.option("--all", "all_runs", is_flag=True, help="Every run's task logs, not only the newest.")
@click.option("--task", help="Only this task's log (and the batch log).")
def logs_command(job_id: str, workdir: Path | None, all_runs: bool, task: str | None) -> None:
    """The batch script's log and the task logs of Slurm job JOB_ID."""
    status = read_job_status(job_id, workdir=workdir)
    files = log_files(status, all_runs=all_runs)
    if task is not None:
        files = [f for f in files if f.name != "task.log" or f.parent.name == task]
    if not files:
        click.echo(f"job {job_id}: no log files yet", err=True)
    for path in files:
        click.echo(f"==> {path} <==")
        click.echo(path.read_text(errors="replace"), nl=False)


COMMANDS: list[click.Command] = [status_command, logs_command]
