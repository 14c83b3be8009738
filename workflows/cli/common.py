"""Options shared by the commands that take a workflow file and values."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

_MULTI_ITEM_OPTIONS = ("--set", "--set-string")


def expand_multi_item_options(args: list[str]) -> list[str]:
    """Turn OSMO's ``--set a=1 b=2`` into ``--set a=1 --set b=2``.

    After ``--set`` the first token is always its value (so ``--set novalue`` reaches
    the values parser and is reported there); later tokens join it while they contain
    ``=`` and do not start with ``-``, which keeps a positional FILE apart.
    """
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            out.extend(args[i:])
            break
        if token in _MULTI_ITEM_OPTIONS and i + 1 < len(args):
            out += [token, args[i + 1]]
            i += 2
            while i < len(args) and "=" in args[i] and not args[i].startswith("-"):
                out += [token, args[i]]
                i += 1
            continue
        out.append(token)
        i += 1
    return out


class ValuesCommand(click.Command):
    """A command whose ``--set`` / ``--set-string`` take several items, like OSMO's CLI."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, expand_multi_item_options(list(args)))


def values_options(func: F) -> F:
    """``FILE`` plus ``-f/--values``, ``--set`` and ``--set-string`` (Helm / OSMO precedence)."""
    decorators = [
        click.argument("file", type=click.Path(dir_okay=False, path_type=Path)),
        click.option(
            "-f",
            "--values",
            "values_files",
            multiple=True,
            type=click.Path(dir_okay=False, path_type=Path),
            help="YAML values file; several are deep-merged in order (after default-values).",
        ),
        click.option(
            "--set",
            "sets",
            multiple=True,
            metavar="KEY=VALUE",
            help="Set a value (tried as int, then float, else string, as OSMO does). "
            "Several items may follow one --set.",
        ),
        click.option(
            "--set-string",
            "set_strings",
            multiple=True,
            metavar="KEY=VALUE",
            help="Set a value as a string; applied after every --set.",
        ),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func
