"""``resched wrap [OPTIONS] -- CMD ...``: thin; the attempt loop is ``wrapper.wrap``.

Every option a backend may need to set has an environment variable default
(``RESCHED_*``); a flag on the command line wins over the environment.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import click

from workflows.cli.common import NameParam, NonEmptyPath, bounded_int
from wrapper import config as cfg
from wrapper.backoff import parse_backoff
from wrapper.durations import parse_duration
from wrapper.errors import ReschedError
from wrapper.hang import parse_hang_timeout
from wrapper.stop_outcome import parse_stop_signal
from wrapper.state_dir import STATE_HELP, default_state_dir
from wrapper.wrap import WrapConfig, default_allocation, run_wrap

_PATH = click.Path(path_type=Path)
_DIR = NonEmptyPath(file_okay=False, path_type=Path)  # click names a path of the wrong kind
_FILE = NonEmptyPath(dir_okay=False, path_type=Path)


def _seconds(value: str | None, flag: str) -> float | None:
    return None if value in (None, "") else parse_duration(value, where=flag)


@click.command(
    "wrap",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--reschedule-code", type=int, default=cfg.DEFAULT_RESCHEDULE_CODE, show_default=True,
              envvar=cfg.RESCHEDULE_CODE_ENV,
              help="Exit code that asks the orchestrator to reschedule (list it under "
                   "RESCHEDULE in the task's exitActions).")
@click.option("--abort-code", type=int, default=cfg.DEFAULT_ABORT_CODE, show_default=True,
              envvar=cfg.ABORT_CODE_ENV,
              help="Exit code for abort (must not be a RESCHEDULE code).")
@click.option("--max-retries", type=bounded_int(0), default=cfg.DEFAULT_MAX_RETRIES, show_default=True,
              envvar=cfg.MAX_RETRIES_ENV, help="In-place restarts per allocation.")
@click.option("--max-reschedules", type=bounded_int(0), default=cfg.DEFAULT_MAX_RESCHEDULES, show_default=True,
              envvar=cfg.MAX_RESCHEDULES_ENV, help="Reschedules for failures (whole job).")
@click.option("--no-budget-reset", is_flag=True,
              help="Do not reset the budgets when the checkpoint step advanced.")
@click.option("--grace", default=f"{cfg.DEFAULT_GRACE_S:g}", show_default=True, envvar=cfg.GRACE_ENV,
              help="Seconds between the forwarded stop signal and SIGKILL.")
@click.option("--backoff", default=None, envvar=cfg.BACKOFF_ENV,
              help="Wait before an in-place retry: the first retry starts at once, then BASE "
                   "doubling up to max, +-jitter (default 1s,max=60s,jitter=0.5; 0 = never "
                   "wait).")
@click.option("--hang-grace", default=f"{cfg.DEFAULT_HANG_GRACE_S:g}", show_default=True,
              envvar=cfg.HANG_GRACE_ENV,
              help="Seconds a hung group gets between SIGTERM and SIGKILL (it cannot "
                   "checkpoint while hung; capped by --grace).")
@click.option("--hang-timeout", default=None, envvar=cfg.HANG_TIMEOUT_ENV,
              help="No progress (heartbeat, or output lines without heartbeats) for this "
                   "long = hung; 'auto' calibrates like NVRx (auto,initial=30m,later=5m,"
                   "factor=5,min=30s,warmup=3). Default: off.")
@click.option("--teardown-timeout", default=f"{cfg.DEFAULT_TEARDOWN_TIMEOUT_S:g}", show_default=True,
              envvar=cfg.TEARDOWN_TIMEOUT_ENV,
              help="A training that said it finished (its framework's finish line, the "
                   "finished flag) but whose processes do not exit is ended after this long "
                   "and counted complete; 'off' waits for the exit.")
@click.option("--heartbeat-file", type=_FILE, default=None,
              help="File wrapper.heartbeat() touches (default: a private temp file).")
@click.option("--checkpoint-dir", type=_DIR, default=None, envvar=cfg.CHECKPOINT_DIR_ENV,
              help="Local directory the training writes checkpoints to.")
@click.option("--checkpoint-url", default=None, envvar=cfg.CHECKPOINT_URL_ENV,
              help="Checkpoint store URL the wrapper owns: restore at start, sync, final publish.")
@click.option("--sync-every", default=None, envvar=cfg.SYNC_EVERY_ENV,
              help="Publish the checkpoint dir to --checkpoint-url this often (e.g. 10m).")
@click.option("--state-dir", type=_DIR, default=None, envvar=cfg.STATE_DIR_ENV,
              help=STATE_HELP)
@click.option("--rules", "rule_files", type=_FILE, multiple=True,
              help="Extra rules file (YAML); repeatable; takes precedence over the catalogue.")
@click.option("--expect-finished-flag", type=_FILE, default=None,
              envvar=cfg.EXPECT_FINISHED_FLAG_ENV,
              help="Exit 0 counts as complete only if this file exists.")
@click.option("--node", type=NameParam(), default=None, envvar=cfg.NODE_ENV,
              help="Node name for the records (default: the hostname).")
@click.option("--outcome-file", type=_FILE, default=None, envvar=cfg.OUTCOME_FILE_ENV,
              help="Also write the final outcome record here.")
@click.option("--stop-signal", default="TERM", show_default=True, envvar="RESCHED_STOP_SIGNAL",
              help="Any stop the wrapper receives (TERM, INT, HUP, USR1, Slurm's grace) "
                   "reaches the training as this signal, then --grace, then SIGKILL. "
                   "Lightning (SLURM auto-requeue) listens for USR1.")
@click.option("--ft-state", type=_PATH, default=None, envvar="RESCHED_FT_STATE",
              help="NVRx ft_state.json (calculated timeouts): carried with the state dir "
                   "across reschedules, put back here when missing.")
@click.option("--stop-broadcast", is_flag=True, envvar="RESCHED_STOP_BROADCAST",
              help="The scheduler sends stop signals to every process of the task (Slurm "
                   "job steps): do not send the training the same signal a second time.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def wrap(
    command: tuple[str, ...], reschedule_code: int, abort_code: int, max_retries: int,
    max_reschedules: int, no_budget_reset: bool, grace: str, backoff: str | None, hang_grace: str,
    hang_timeout: str | None, teardown_timeout: str,
    heartbeat_file: Path | None, checkpoint_dir: Path | None, checkpoint_url: str | None,
    sync_every: str | None, state_dir: Path | None, rule_files: tuple[Path, ...],
    expect_finished_flag: Path | None, node: str | None, outcome_file: Path | None,
    stop_signal: str = "TERM", stop_broadcast: bool = False, ft_state: Path | None = None,
) -> None:
    """Run CMD, classify how it ended, and retry / reschedule / abort.

    Exit codes: 0 complete, --reschedule-code, --abort-code, 70 wrapper bug.
    """
    node_name = node or socket.gethostname()
    try:
        config = WrapConfig(
            command=tuple(command),
            state_dir=state_dir or default_state_dir(checkpoint_dir, command),
            node=node_name,
            allocation=default_allocation(node_name, os.environ),
            reschedule_code=reschedule_code,
            abort_code=abort_code,
            max_retries=max_retries,
            max_reschedules=max_reschedules,
            reset_on_progress=not no_budget_reset,
            backoff=parse_backoff(backoff),
            grace_s=_seconds(grace, "--grace") or 0.0,
            hang_grace_s=_seconds(hang_grace, "--hang-grace") or 0.0,
            hang=parse_hang_timeout(hang_timeout),
            heartbeat_file=heartbeat_file,
            checkpoint_dir=checkpoint_dir,
            checkpoint_url=checkpoint_url or None,
            sync_every_s=_seconds(sync_every, "--sync-every"),
            rule_files=tuple(rule_files),
            expect_finished_flag=expect_finished_flag,
            outcome_file=outcome_file,
            stop_signal=parse_stop_signal(stop_signal),
            stop_broadcast=stop_broadcast,
            ft_state=ft_state.absolute() if ft_state is not None else None,
            teardown_timeout_s=(None if teardown_timeout.strip().lower() in ("off", "none")
                                else _seconds(teardown_timeout, "--teardown-timeout") or None),
        )
        code = run_wrap(config)
    except ReschedError as error:
        # A usage error that exits with the reschedule code would be rescheduled forever.
        if error.exit_code == reschedule_code:
            error.exit_code = 1 if reschedule_code != 1 else 2
        raise
    sys.exit(code)


COMMANDS: list[click.Command] = [wrap]
