"""Backend options declared once (name, type, default, help) -> click flags and validation.

Each backend lists its options as :class:`BackendOption` rows. ``resched submit`` and
``resched run`` derive their flags from those rows (:func:`click_options`), and every
backend checks what it is given with :func:`parse_options`, so a bad value gets the same
one line wherever it comes from: what is wrong, the flag, the valid values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from workflows.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])


class OptionType(str, Enum):
    TEXT = "text"
    INT = "int"
    PATH = "path"  # a directory or file path (not checked for existence)
    CHOICE = "choice"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class BackendOption:
    """One backend option: ``--max-retry-per-task`` is ``max_retry_per_task``."""

    name: str
    type: OptionType
    help: str
    default: Any = None  # None: not set (the backend or the tool it drives decides)
    choices: tuple[str, ...] = ()  # CHOICE: valid values, compared case-insensitively
    minimum: int | None = None  # INT: smallest valid value

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def convert(self, value: Any, backend: str) -> Any:
        """``value`` checked and converted; one clear line when it is not valid."""
        if self.type is OptionType.INT:
            try:
                number = int(value) if not isinstance(value, bool) else None
            except (TypeError, ValueError):
                number = None
            if number is None or (self.minimum is not None and number < self.minimum):
                low = f" >= {self.minimum}" if self.minimum is not None else ""
                example = self.default if self.default is not None else self.minimum or 0
                raise UsageError(f"{self.flag} {value!r} is not a whole number{low} ({backend} backend)",
                                 fix=f"e.g. {self.flag} {example}")
            return number
        if self.type is OptionType.CHOICE:
            text = str(value).strip().upper().removeprefix("SIG") if self._signal_like else str(value).strip()
            for choice in self.choices:
                if text.lower() == choice.lower():
                    return choice
            raise UsageError(f"{self.flag} {value!r} is not valid for the {backend} backend",
                             fix=f"use one of: {', '.join(self.choices)}")
        if self.type is OptionType.PATH:
            return Path(value)
        text = str(value)
        if not text.strip():
            raise UsageError(f"{self.flag} is empty ({backend} backend)", fix=f"give a value: {self.help}")
        return text

    @property
    def _signal_like(self) -> bool:
        return self.name.endswith("signal")


def parse_options(table: Sequence[BackendOption], given: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """Every option of ``table``: given ones converted, the others at their default.

    An option the backend does not take is refused with the flags it does take.
    """
    known = {o.name: o for o in table}
    for key, value in given.items():
        if key not in known and value is not None:
            takes = ", ".join(o.flag for o in table) or "no options"
            raise UsageError(f"--{key.replace('_', '-')} is not an option of the {backend} backend",
                             fix=f"the {backend} backend takes {takes}")
    return {
        o.name: (o.convert(given[o.name], backend) if given.get(o.name) is not None else o.default)
        for o in table
    }


def option_help(table: Iterable[BackendOption]) -> dict[str, str]:
    return {o.name: o.help for o in table}


def click_options(tables: Mapping[str, Sequence[BackendOption]], *, tag: bool = True) -> Callable[[F], F]:
    """Click flags for the union of ``tables`` (backend -> options); no click defaults, so
    that an option nobody typed stays None and each backend applies its own default.
    With ``tag``, each help starts with the backends that take it, e.g. ``[local, slurm]``."""
    import click

    merged: dict[str, tuple[BackendOption, list[str]]] = {}
    for backend, table in tables.items():
        for option in table:
            merged.setdefault(option.name, (option, []))[1].append(backend)

    def decorate(func: F) -> F:
        for option, backends in reversed(list(merged.values())):
            kind: Any = None
            if option.type is OptionType.INT:
                kind = click.IntRange(min=option.minimum) if option.minimum is not None else int
            elif option.type is OptionType.PATH:
                kind = click.Path(path_type=Path)
            default = f" (default {option.default})" if option.default is not None else ""
            prefix = f"[{', '.join(backends)}] " if tag else ""
            metavar = "[" + "|".join(option.choices) + "]" if option.choices else None
            func = click.option(option.flag, option.name, type=kind, default=None, metavar=metavar,
                                help=f"{prefix}{option.help}{default}")(func)
        return func

    return decorate
