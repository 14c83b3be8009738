"""LineScanner: find rule matches in log lines as they stream past.

``feed`` is called for every line the training prints, so it must be cheap: one
combined prefilter regex (all rule patterns joined) rejects the ordinary line with a
single C-level search; only lines it accepts are tested rule by rule. ANSI colour
codes are removed before matching. Hits are kept per rule (the first and the last
few), so a flood of cascade lines can never push the root cause out.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wrapper.launcher_logs import strip_ansi

if TYPE_CHECKING:
    from wrapper.rules import RuleSet

_KEEP_PER_RULE = 8  # first N and last N hits of each rule
_MAX_TEXT = 1000  # evidence text kept per hit (a window around the match)


@dataclass(frozen=True)
class LogHit:
    rule_id: str
    stream: str
    lineno: int
    text: str
    seq: int


def _window(text: str, start: int) -> str:
    if len(text) <= _MAX_TEXT:
        return text
    begin = max(0, start - 200)
    end = begin + _MAX_TEXT
    return ("..." if begin else "") + text[begin:end] + ("..." if end < len(text) else "")


class LineScanner:
    def __init__(self, rules: RuleSet) -> None:
        self._rules: list[tuple[str, tuple[re.Pattern[str], ...]]] = [
            (rule.id, rule.patterns) for rule in rules.rules if rule.patterns
        ]
        unique = dict.fromkeys(p.pattern for _, patterns in self._rules for p in patterns)
        self._prefilter = re.compile("|".join(f"(?:{p})" for p in unique), re.MULTILINE) if unique else None
        self._lines: dict[str, int] = {}
        self._seq = 0
        self._first: dict[str, list[LogHit]] = {}
        self._last: dict[str, deque[LogHit]] = {}

    @property
    def prefilter(self) -> re.Pattern[str] | None:
        """The combined regex (also what the benchmark hands to ``grep -E``)."""
        return self._prefilter

    def feed(self, line: str, stream: str = "stdout") -> LogHit | None:
        """Scan one line; return the hit of the highest-precedence rule, if any."""
        lineno = self._lines.get(stream, 0) + 1
        self._lines[stream] = lineno
        if self._prefilter is None:
            return None
        if "\x1b" in line:
            line = strip_ansi(line)
        found = self._prefilter.search(line)
        if found is None:
            return None
        return self._match_line(line.rstrip("\r\n"), stream, lineno, found.start())

    def feed_text(self, text: str, stream: str = "stdout") -> int:
        """Scan a chunk of whole lines at once (same result as feeding each line).

        The prefilter runs over the whole chunk in C; Python only touches the lines
        it accepts. Returns the number of lines in the chunk.
        """
        base = self._lines.get(stream, 0)
        if "\x1b" in text:
            text = strip_ansi(text)
        lines_in_chunk = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        self._lines[stream] = base + lines_in_chunk
        if self._prefilter is None:
            return lines_in_chunk
        counted_to, counted = 0, 0
        pos = 0
        search = self._prefilter.search
        while True:
            found = search(text, pos)
            if found is None:
                break
            start = text.rfind("\n", 0, found.start()) + 1
            end = text.find("\n", found.start())
            end = len(text) if end < 0 else end
            counted += text.count("\n", counted_to, start)
            counted_to = start
            self._match_line(text[start:end].rstrip("\r"), stream, base + counted + 1, found.start() - start)
            pos = end + 1
        return lines_in_chunk

    def _match_line(self, line: str, stream: str, lineno: int, start: int) -> LogHit | None:
        first: LogHit | None = None
        for rule_id, patterns in self._rules:
            if any(p.search(line) for p in patterns):
                hit = LogHit(rule_id=rule_id, stream=stream, lineno=lineno, text=_window(line, start), seq=self._seq)
                self._seq += 1
                self._store(hit)
                first = first or hit
        return first

    def _store(self, hit: LogHit) -> None:
        first = self._first.setdefault(hit.rule_id, [])
        if len(first) < _KEEP_PER_RULE:
            first.append(hit)
            return
        self._last.setdefault(hit.rule_id, deque(maxlen=_KEEP_PER_RULE)).append(hit)

    @property
    def hits(self) -> tuple[LogHit, ...]:
        """Kept hits of every rule (first N + last N each), in the order they were seen."""
        kept = [h for hits in self._first.values() for h in hits]
        kept += [h for hits in self._last.values() for h in hits]
        return tuple(sorted(kept, key=lambda h: h.seq))

    def lines_seen(self, stream: str = "stdout") -> int:
        return self._lines.get(stream, 0)
