"""The ``resched`` command line: thin click commands over the library.

Each command module exposes ``COMMANDS`` (a list of click commands); this module
only assembles them and turns a :class:`ReschedError` into one line on stderr and a
non-zero exit (a traceback only with ``--debug`` or ``RESCHED_DEBUG=1``).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from wrapper.errors import ReschedError

# One module per area, so that areas evolve without touching each other.
_COMMAND_MODULES = (
    "workflows.cli.render_cmd",  # render
    "workflows.cli.spec_cmds",  # validate, lint, templates, init
    "workflows.cli.submit_cmd",  # submit --backend local|osmo|slurm
    "workflows.cli.wrap_cmds",  # wrap
    "workflows.cli.classify_cmd",  # classify
    "workflows.cli.checkpoint_cmds",  # checkpoint publish|restore|list|verify
    "workflows.cli.run_cmds",  # run (the local executor)
    "workflows.cli.slurm_cmds",  # status, logs
)

INTERNAL_ERROR_EXIT = 70  # EX_SOFTWARE: a bug in resched, never mistaken for success


def _debug_requested(ctx: click.Context | None) -> bool:
    if os.environ.get("RESCHED_DEBUG", "") not in ("", "0"):
        return True
    while ctx is not None:
        if isinstance(ctx.obj, dict) and ctx.obj.get("debug"):
            return True
        ctx = ctx.parent
    return "--debug" in sys.argv[1:2]


class _ReschedGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ReschedError as error:
            if _debug_requested(ctx):
                raise
            click.echo(f"resched: error: {error}", err=True)
            ctx.exit(error.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            raise
        except Exception as error:  # a bug: say so in one line, never exit 0
            if _debug_requested(ctx):
                raise
            click.echo(
                f"resched: internal error: {type(error).__name__}: {error} "
                "(run with --debug for the traceback and please report it)",
                err=True,
            )
            ctx.exit(INTERNAL_ERROR_EXIT)


@click.group(cls=_ReschedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="resched")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """resched: make GPU training jobs survive failures."""
    ctx.obj = {"debug": debug}


for _name in _COMMAND_MODULES:
    for _command in importlib.import_module(_name).COMMANDS:
        main.add_command(_command)
