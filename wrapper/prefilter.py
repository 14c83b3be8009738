"""The scanner's prefilter: reject an ordinary log line with as little work as possible.

Joining every rule regex into one alternation is correct but slow in Python's regex
engine (it tries each branch at each position: ~2 MB/s on the catalogue). Instead,
every pattern is reduced to literal text it cannot match without (found by walking
the parsed regex: a literal run in a sequence, one literal per branch of an
alternation, the body of a repeat that occurs at least once). Those literals are cut
to an *anchor* that starts with an upper-case letter or ``_`` when they have one, and
the anchors are compiled into one trie-shaped regex: its first-character set is small
and mostly rare, so the engine's C loop skips most positions without trying a
branch. Literals without such an anchor are searched with ``str.find``. A pattern with
no usable literal goes into the regex whole, so the prefilter never misses a line
that a rule would match (it is sound; candidates are then checked rule by rule).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

try:  # Python >= 3.11
    from re import _constants as sre_c  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

_MIN_LITERAL = 3
_ANCHOR_LEN = 12
Literal = tuple[str, bool]  # text, case-insensitive


def _best(current: tuple[Literal, ...] | None, candidate: tuple[Literal, ...] | None) -> tuple[Literal, ...] | None:
    if not candidate or min(len(text) for text, _ in candidate) < _MIN_LITERAL:
        return current
    if current is None:
        return candidate

    def score(options: tuple[Literal, ...]) -> tuple[bool, int, int]:
        # literals with an upper-case anchor go into the fast regex: prefer them
        return (all(anchor(t) for t, _ in options), min(len(t) for t, _ in options), -len(options))

    return candidate if score(candidate) > score(current) else current


def _literals(items: Iterable[tuple[Any, Any]], ignore_case: bool) -> tuple[Literal, ...] | None:
    """Literal alternatives of which one must occur wherever ``items`` matches."""
    best: tuple[Literal, ...] | None = None
    run: list[str] = []
    for op, value in items:
        if op is sre_c.LITERAL:
            run.append(chr(value))
            continue
        if run:
            best = _best(best, (("".join(run), ignore_case),))
            run = []
        if op is sre_c.SUBPATTERN:
            _group, add_flags, _del_flags, body = value
            best = _best(best, _literals(body, ignore_case or bool(add_flags & sre_c.SRE_FLAG_IGNORECASE)))
        elif op is sre_c.BRANCH:
            branches = [_literals(branch, ignore_case) for branch in value[1]]
            if all(branches):
                best = _best(best, tuple(lit for branch in branches for lit in branch or ()))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            minimum, _maximum, body = value
            if minimum >= 1:
                best = _best(best, _literals(body, ignore_case))
    if run:
        best = _best(best, (("".join(run), ignore_case),))
    return best


def required_literals(pattern: re.Pattern[str]) -> tuple[Literal, ...] | None:
    """Literals of which at least one occurs in every match; None when none is known."""
    try:
        parsed = sre_parse.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - an unparsable pattern simply gets no literal
        return None
    return _literals(parsed, bool(pattern.flags & re.IGNORECASE))


def anchor(text: str) -> str | None:
    """The longest slice (3 to 12 chars) that starts with an upper-case letter or _."""
    best = None
    for i, char in enumerate(text):
        if char.isupper() or char == "_":
            piece = text[i:i + _ANCHOR_LEN]
            if len(piece) >= 3 and (best is None or len(piece) > len(best)):
                best = piece
    return best


def trie_regex(words: Sequence[str]) -> str:
    """One regex matching any of ``words``, shaped as a trie (shared prefixes once)."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, dict]) -> str:
        if list(node) == [""]:
            return ""
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)


class Prefilter:
    def __init__(self, patterns: Sequence[re.Pattern[str]]) -> None:
        anchors: list[str] = []
        finds: list[str] = []
        whole: list[str] = []
        for pattern in patterns:
            literals = required_literals(pattern)
            if literals is None:
                whole.append(pattern.pattern)
                continue
            for text, ignore_case in literals:
                if ignore_case:
                    whole.append(f"(?i:{re.escape(text)})")
                elif anchor(text):
                    anchors.append(anchor(text) or text)
                else:
                    finds.append(text)
        wholes = [f"(?:{p})" for p in dict.fromkeys(whole)]
        parts = ([trie_regex(list(dict.fromkeys(anchors)))] if anchors else []) + wholes
        self.regex = re.compile("|".join(parts), re.MULTILINE) if parts else None
        # a literal that contains another one is redundant
        unique = sorted(dict.fromkeys(finds), key=len)
        self.finds = tuple(t for i, t in enumerate(unique) if not any(s in t for s in unique[:i]))
        self._search = self.regex.search if self.regex is not None else None

    def may_match(self, line: str) -> bool:
        # measured: the anchor regex plus a few `in` tests beats one regex holding the
        # lower-case literals too (they spoil the regex's first-character skip)
        if self._search is not None and self._search(line) is not None:
            return True
        for literal in self.finds:
            if literal in line:
                return True
        return False

    def candidates(self, text: str) -> Iterator[int]:
        """Positions (unordered, maybe repeated) in ``text`` where a rule may match."""
        if self.regex is not None:
            for found in self.regex.finditer(text):
                yield found.start()
        for literal in self.finds:
            position = text.find(literal)
            while position >= 0:
                yield position
                position = text.find(literal, position + 1)
