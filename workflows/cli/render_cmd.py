"""``resched render FILE [-f FILE] [--set K=V ...] [--set-string K=V ...]``.

Prints what ``osmo workflow submit --dry-run`` prints for the same file and values:
the server's rendered workflow section, byte for byte, followed by ONE newline (OSMO's
client prints the server's text with Python's ``print``, which adds it). ``--raw``
prints the server's text alone, without that newline. Strings that came from bytes
that are not UTF-8 (``--set`` of raw bytes) are written back as the same bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from workflows.cli.common import ValuesCommand, values_options
from workflows.render import render_file
from workflows.values import ValueOptions


@click.command("render", cls=ValuesCommand)
@values_options
@click.option("--raw", is_flag=True,
              help="Print the server's text exactly, without the newline `osmo --dry-run` adds.")
def render_command(
    file: Path,
    values_files: tuple[Path, ...],
    sets: tuple[str, ...],
    set_strings: tuple[str, ...],
    raw: bool,
) -> None:
    """Print the workflow exactly as OSMO's server renders it."""
    options = ValueOptions(files=tuple(values_files), sets=tuple(sets), set_strings=tuple(set_strings))
    rendered = render_file(file, options)
    for note in rendered.notes:
        click.echo(f"resched: warning: {note}", err=True)
    text = rendered.text if raw else rendered.text + "\n"
    sys.stdout.flush()
    sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
    sys.stdout.buffer.flush()


COMMANDS: list[click.Command] = [render_command]
