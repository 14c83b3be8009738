"""Options shared by the commands that take a workflow file and values."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from wrapper.pathcheck import Kind, PathKindError, check_path_kind

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


# -- option types that refuse nonsense in one line (issue 13: "accepted nonsense") --------

# Counts and seconds handed to OSMO / Slurm / the local executor: their fields are 32-bit.
MAX_INT = 2**31 - 1


def bounded_int(minimum: int, maximum: int = MAX_INT) -> click.IntRange:
    """An integer option with both ends checked (``99999999999999999999`` is not a count)."""
    return click.IntRange(min=minimum, max=maximum)


class FiniteFloat(click.ParamType):
    """A float at least ``minimum``; ``nan`` and ``inf`` (which click's FloatRange lets
    through, since nan compares false) are refused."""

    name = "number"

    def __init__(self, minimum: float = 0.0, maximum: float = 1e9) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not self.minimum <= number <= self.maximum:  # also false for nan
            self.fail(f"{value!r} is not a number from {self.minimum:g} to {self.maximum:g}",
                      param, ctx)
        return number


class NameParam(click.ParamType):
    """A name passed on to another tool (pool, partition, account): one word, not an option.

    A newline would add a line to the sbatch script; a leading ``-`` would be read by the
    tool as one of its own options.
    """

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text or text.startswith("-") or any(c.isspace() or not c.isprintable() for c in text):
            self.fail(f"{text!r} is not a name (one word, no spaces or control characters, "
                      "not starting with '-')", param, ctx)
        return text


# sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or unlimited.
_SLURM_TIME = re.compile(
    r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}|\d+-\d{1,2}:\d{1,2}|"
    r"\d+-\d{1,2}:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)$", re.IGNORECASE)


class SlurmTimeParam(click.ParamType):
    """An ``sbatch --time`` value in one of Slurm's forms (checked here, not by sbatch later)."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not _SLURM_TIME.match(text):
            self.fail(f"{text!r} is not a Slurm time limit (use MINUTES, HH:MM:SS, D-HH:MM:SS "
                      "or UNLIMITED)", param, ctx)
        return text


def path_kind(want: Kind) -> Callable[[click.Context, click.Parameter, Path | None], Path | None]:
    """A click callback: the path is (or can be created as) a directory / regular file."""
    def check(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
        if value is not None:
            try:
                check_path_kind(value, want, param.opts[0] if param.opts else str(param.name))
            except PathKindError as error:
                raise click.BadParameter(error.message, ctx, param) from None
        return value
    return check


class NonEmptyPath(click.Path):
    """``click.Path`` that refuses ``''``, which it would turn into ``.`` (the cwd)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value == "":
            self.fail("the path is empty", param, ctx)
        return super().convert(value, param, ctx)
