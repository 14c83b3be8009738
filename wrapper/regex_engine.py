"""User regexes run in linear time, or are refused when they are loaded.

Python's ``re`` backtracks: a user rule such as ``(a+)+$`` or ``(x|x)*y`` takes
exponential time on a line that almost matches, and since ``re`` holds the GIL while it
searches, the wrapper (whose signal handlers run between bytecodes) stopped answering
SIGTERM too (issue 21). So a pattern from a user's rules file:

- runs on RE2 (``google-re2``, import ``re2``; a declared dependency) when RE2 accepts
  it: RE2 matches in time linear in the line, whatever the pattern. RE2's ``\\d \\w \\s
  \\b`` are ASCII, so it matches a subset of what ``re`` would on non-ASCII text; the
  scanner's prefilter is built from the ``re`` form, so it stays sound;
- otherwise (RE2 missing, or the pattern needs what RE2 lacks: lookaround,
  backreferences) runs on ``re`` only if it cannot backtrack catastrophically: a
  backreference inside a repeat, a variable-width repeat inside an unbounded repeat, an unbounded repeat of
  alternatives that can start with the same character, or three or more unbounded
  repeats in a row that can eat the same characters are refused at load with one line.

The catalogue's own patterns are reviewed and tested and stay on ``re``.
``RESCHED_REGEX_ENGINE=re`` turns RE2 off (to test the fallback).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

try:  # Python >= 3.11
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

try:
    import re2 as _re2
except ImportError:  # pragma: no cover - declared, but resched must work without it
    _re2 = None

ENGINE_ENV = "RESCHED_REGEX_ENGINE"
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT) + ((_c.POSSESSIVE_REPEAT,)
                                             if hasattr(_c, "POSSESSIVE_REPEAT") else ())
_UNBOUNDED = _c.MAXREPEAT


class UnsafePattern(ValueError):
    """A pattern that can backtrack catastrophically and has no linear engine here."""


def re2_available() -> bool:
    return _re2 is not None and os.environ.get(ENGINE_ENV, "").lower() != "re"


class LinearPattern:
    """A user pattern on RE2; looks like the ``re.Pattern`` it was made from (``pattern``,
    ``flags``, ``search``, ``finditer``) so the scanner and the classifier use it as is."""

    def __init__(self, compiled: re.Pattern[str], engine: Any) -> None:
        self.re_pattern = compiled
        self.pattern = compiled.pattern
        self.flags = compiled.flags
        self.groups = compiled.groups
        self._engine = engine

    def search(self, text: str, *args: int) -> Any:
        return self._engine.search(text, *args)

    def finditer(self, text: str) -> Iterator[Any]:
        return self._engine.finditer(text)

    def __repr__(self) -> str:
        return f"LinearPattern({self.pattern!r})"


def _re2_compile(pattern: str, flags: int) -> Any | None:
    if not re2_available() or flags & (re.VERBOSE | re.LOCALE):
        return None
    inline = ("i" if flags & re.IGNORECASE else "") + ("s" if flags & re.DOTALL else "") \
        + ("m" if flags & re.MULTILINE else "")
    try:
        return _re2.compile(f"(?{inline}){pattern}" if inline else pattern)
    except Exception:  # noqa: BLE001 - re2.error, or a pattern RE2 reads differently
        return None


def user_pattern(compiled: re.Pattern[str]) -> re.Pattern[str] | LinearPattern:
    """The pattern to run for a user rule: on RE2, or on ``re`` when that is safe.

    Raises :class:`UnsafePattern` (its text says why) when neither is possible.
    """
    flags = compiled.flags & ~re.UNICODE
    engine = _re2_compile(compiled.pattern, flags)
    if engine is not None:
        return LinearPattern(compiled, engine)
    why = backtracking_risk(compiled)
    if why:
        raise UnsafePattern(why)
    return compiled


def compile_alternation(parts: list[str], flags: int = 0) -> Any:
    """One searcher for ``|``-joined ``parts`` (the prefilter's): the parts RE2 takes run
    on RE2, the rest (the catalogue's lookarounds; user parts that passed
    :func:`backtracking_risk`) on ``re``. ``search`` / ``finditer`` as on a pattern;
    ``finditer`` positions come unordered when both engines are used."""
    whole = _re2_compile("|".join(parts), flags)
    if whole is not None or not re2_available():
        return whole if whole is not None else re.compile("|".join(parts), flags)
    on_re2 = [part for part in parts if _re2_compile(part, flags) is not None]
    on_re = [part for part in parts if part not in on_re2]
    engines = [e for e in (_re2_compile("|".join(on_re2), flags) if on_re2 else None,
                           re.compile("|".join(on_re), flags) if on_re else None) if e is not None]
    return engines[0] if len(engines) == 1 else _Both(engines)


class _Both:
    def __init__(self, engines: list[Any]) -> None:
        self._engines = engines

    def search(self, text: str) -> Any:
        for engine in self._engines:
            found = engine.search(text)
            if found is not None:
                return found
        return None

    def finditer(self, text: str) -> Iterator[Any]:
        for engine in self._engines:
            yield from engine.finditer(text)


# -- what makes `re` backtrack catastrophically ------------------------------------------

def backtracking_risk(compiled: re.Pattern[str]) -> str:
    """Why ``compiled`` may take exponential (or high-polynomial) time on ``re``; ``""``
    when no such shape is found."""
    try:
        parsed = _p.parse(compiled.pattern, compiled.flags)
    except Exception:  # noqa: BLE001 - it compiled once; an unreadable one is not trusted
        return "it cannot be analysed"
    return _risk(list(parsed), inside_unbounded=False)


def _risk(items: list[Any], *, inside_unbounded: bool) -> str:
    run = 0  # unbounded repeats in a row that may eat the same characters
    for op, arg in items:
        if (op is _c.GROUPREF or op is _c.GROUPREF_EXISTS) and inside_unbounded:
            return "it repeats a backreference, like (a+)\\1*"
        if op in _REPEATS:
            low, high, body = arg
            body = list(body)
            unbounded = high == _UNBOUNDED
            if (unbounded or high > 1) and _width_varies(body) \
                    and (_has_unbounded(body) or unbounded and _can_repeat(body)):
                return "it nests an unbounded repeat inside a repeat, like (a+)+ or (.*x){9}"
            if unbounded and _overlapping_branches(body):
                return "it repeats alternatives that can match the same text, like (a|ab)*"
            why = _risk(body, inside_unbounded=inside_unbounded or unbounded)
            if why:
                return why
            run = run + 1 if unbounded else run
            if run >= 3:
                return "it has three or more unbounded repeats in a row, like .*.*.*"
            continue
        if op is _c.SUBPATTERN:
            why = _risk(list(arg[-1]), inside_unbounded=inside_unbounded)
            if why:
                return why
        elif op is _c.BRANCH:
            for branch in arg[1]:
                why = _risk(list(branch), inside_unbounded=inside_unbounded)
                if why:
                    return why
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            why = _risk(list(arg[1]), inside_unbounded=inside_unbounded)
            if why:
                return why
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.IN, _c.ANY):
            continue  # a single character does not break a run of .* .* .*
        if op is not _c.AT:
            run = 0
    return ""


def _walk(items: list[Any]) -> Iterator[tuple[Any, Any]]:
    for op, arg in items:
        yield op, arg
        if op in _REPEATS:
            yield from _walk(list(arg[2]))
        elif op is _c.SUBPATTERN:
            yield from _walk(list(arg[-1]))
        elif op is _c.BRANCH:
            for branch in arg[1]:
                yield from _walk(list(branch))
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            yield from _walk(list(arg[1]))


def _has_unbounded(items: list[Any]) -> bool:
    return any(op in _REPEATS and arg[1] == _UNBOUNDED for op, arg in _walk(items))


def _can_repeat(items: list[Any]) -> bool:
    return any(op in _REPEATS and arg[1] > 1 for op, arg in _walk(items))


def _width_varies(items: list[Any]) -> bool:
    try:
        low, high = _p.SubPattern(_p.State(), items).getwidth()
    except (IndexError, KeyError):  # a backreference: its width is the group's, unknown here
        return True
    return bool(low != high)


def _first_chars(items: list[Any]) -> set[Any] | None:
    """The characters a match of ``items`` can start with; None = any / unknown."""
    for op, arg in items:
        if op is _c.LITERAL:
            return {arg}
        if op is _c.SUBPATTERN:
            return _first_chars(list(arg[-1]))
        if op is _c.BRANCH:
            found: set[Any] = set()
            for branch in arg[1]:
                first = _first_chars(list(branch))
                if first is None:
                    return None
                found |= first
            return found
        if op is _c.AT:
            continue
        return None
    return set()


def _overlapping_branches(body: list[Any]) -> bool:
    for op, arg in body:
        if op is _c.SUBPATTERN:
            return _overlapping_branches(list(arg[-1]))
        if op is _c.BRANCH:
            seen: set[Any] = set()
            for branch in arg[1]:
                first = _first_chars(list(branch))
                if first is None or first & seen:
                    return True
                seen |= first
            return False
        if op is _c.IN and len(body) == 1:
            return False
    return False
