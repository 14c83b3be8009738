"""The ``resched`` command line: thin click commands over the library.

Each command module exposes ``COMMANDS`` (a list of click commands); this module
only assembles them and turns a :class:`ReschedError` into one line on stderr and a
non-zero exit (a traceback only with ``--debug`` or ``RESCHED_DEBUG=1``).

Command modules are imported lazily, when their command runs: ``resched wrap`` starts
inside every training task and must not pay for pydantic, Jinja or fsspec-heavy imports
that only the control side needs.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from wrapper.config import INTERNAL_ERROR_EXIT  # EX_SOFTWARE, shared with `resched wrap`
from wrapper.errors import ReschedError
from wrapper.redact import redact
from wrapper.safe_output import safe_streams
from wrapper.version import VERSION

# command name -> the module that defines it (one module per area).
_COMMAND_MODULES = {
    "render": "workflows.cli.render_cmd",
    "validate": "workflows.cli.spec_cmds",
    "lint": "workflows.cli.spec_cmds",
    "templates": "workflows.cli.spec_cmds",
    "init": "workflows.cli.spec_cmds",
    "submit": "workflows.cli.submit_cmd",
    "run": "workflows.cli.run_cmds",
    "wrap": "workflows.cli.wrap_cmds",
    "classify": "workflows.cli.classify_cmd",
    "checkpoint": "workflows.cli.checkpoint_cmds",
    "status": "workflows.cli.slurm_cmds",
    "logs": "workflows.cli.slurm_cmds",
    "report": "workflows.cli.report_cmd",
    "simulate": "workflows.cli.simulate_cmd",
}

# command name -> its one-line summary, so `resched --help` lists the commands without
# importing every area (pydantic, Jinja, fsspec: most of the start-up time). A test keeps
# each summary equal to the command's own docstring summary; a command without one here
# is still listed (by importing its module).
COMMAND_SUMMARIES = {
    'checkpoint': ('Publish, restore, list and verify checkpoints in a store '
                   '(a path or fsspec URL).'),
    'classify': 'Diagnose a failed run from its saved log, exit code and error files.',
    'init': 'Copy the shipped template NAME (and the files it uploads) into DIRECTORY.',
    'lint': 'Check FILE for resilience mistakes before GPU hours are spent.',
    'logs': "The batch script's log and the task logs of Slurm job JOB_ID.",
    'render': "Print the workflow exactly as OSMO's server renders it.",
    'report': ('Show the report of a finished `resched run` '
               '(RUN_DIR is its --workdir or report.json).'),
    'run': "Run FILE on this machine with OSMO's runtime semantics (the local executor).",
    'simulate': ("Replay failures through resched's decision code (or a baseline) and "
                 "report ETTR."),
    'status': ("State, restarts, every run's result and the last outcome record of "
               "Slurm job JOB_ID."),
    'submit': 'Validate, lint and submit FILE to a backend (local runs it here).',
    'templates': 'List the shipped workflow templates.',
    'validate': 'Render FILE, validate it as an OSMO v2 spec, and lint it.',
    'wrap': 'Run CMD, classify how it ended, and retry / reschedule / abort.',
}



def _short_help(name: str, summary: str, limit: int) -> str:
    """The short help click would show for a command whose help is ``summary`` (through
    its public API: ``click.utils.make_default_short_help`` is deprecated in Click 8.3)."""
    return click.Command(name, help=summary).get_short_help_str(limit)


def _debug_requested(ctx: click.Context | None) -> bool:
    if os.environ.get("RESCHED_DEBUG", "") not in ("", "0"):
        return True
    while ctx is not None:
        if isinstance(ctx.obj, dict) and ctx.obj.get("debug"):
            return True
        ctx = ctx.parent
    return "--debug" in sys.argv[1:2]


class _ReschedGroup(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        # One filter for everything the command prints, click's own errors included:
        # credentials masked, control characters from logs and inputs escaped.
        with safe_streams():
            return super().main(*args, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(_COMMAND_MODULES) | set(self.commands))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            summary = COMMAND_SUMMARIES.get(name)
            if summary is None or name in self.commands:  # not lazy: ask the command
                command = self.get_command(ctx, name)
                if command is None or command.hidden:
                    continue
                rows.append((name, command.get_short_help_str(limit)))
            else:
                rows.append((name, _short_help(name, summary, limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        module_name = _COMMAND_MODULES.get(cmd_name)
        if module_name is None:
            return None
        for command in importlib.import_module(module_name).COMMANDS:
            if command.name == cmd_name:
                return command  # type: ignore[no-any-return]
        raise RuntimeError(f"{module_name} does not define the {cmd_name!r} command")

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ReschedError as error:
            if _debug_requested(ctx):
                raise
            click.echo(redact(f"resched: error: {error}"), err=True)
            ctx.exit(error.exit_code)
        except click.ClickException as error:  # click prints it: redact its text first
            error.message = redact(error.message)
            raise
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            raise
        except Exception as error:  # a bug: say so in one line, never exit 0
            if _debug_requested(ctx):
                raise
            click.echo(
                redact(f"resched: internal error: {type(error).__name__}: {error} ")
                + "(run with --debug for the traceback and please report it)",
                err=True,
            )
            ctx.exit(INTERNAL_ERROR_EXIT)


@click.group(cls=_ReschedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(version=VERSION, prog_name="resched")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """resched: make GPU training jobs survive failures."""
    ctx.obj = {"debug": debug}

