"""LineScanner: find rule matches in log lines as they stream past.

``feed`` is called for every line the training prints, so it must be cheap: a
prefilter rejects the ordinary line with one C-level search, and ``feed_text`` runs it
over a whole block (Hyperscan when installed, else a literal-anchor regex: see
wrapper/classifier/prefilter.py); only lines it proposes are tested rule by rule with ``re``, so
the engine never changes which rule matched or where. ANSI colour
codes are removed before matching. A pattern anchored at the start of the message
(``^``) is also tried after the launcher / logger prefixes of the line (line_prefix.py:
``[rank0]:``, Ray's ``(Worker pid=9)``, timestamps...) and at each part of a traceback
flattened onto one line. Hits are kept per rule (the
first and the last few), so a flood of cascade lines can never push the root cause out.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wrapper.classifier.launcher_logs import strip_ansi
from wrapper.classifier.line_prefix import REPAIR_PROBES, anchored, message_starts, unanchored
from wrapper.classifier.prefilter import make_prefilter

if TYPE_CHECKING:
    from wrapper.classifier.rules import RuleSet

KEEP_PER_RULE = 8  # first N and last N hits of each rule
_MAX_TEXT = 1000  # evidence text kept per hit (a window around the match)


@dataclass(frozen=True)
class LogHit:
    rule_id: str
    stream: str
    lineno: int
    text: str
    seq: int
    # Set after output went by unseen (zero-copy bursts): ``lineno`` then counts from
    # this byte offset of the stream (line 1 starts there), not from the stream's start.
    after_byte: int | None = None


def _window(text: str, start: int) -> str:
    if len(text) <= _MAX_TEXT:
        return text
    begin = max(0, start - 200)
    end = begin + _MAX_TEXT
    return ("..." if begin else "") + text[begin:end] + ("..." if end < len(text) else "")


class LineScanner:
    def __init__(self, rules: RuleSet) -> None:
        self._rules: list[tuple[str, tuple[re.Pattern[str], ...], tuple[re.Pattern[str], ...]]] = [
            (rule.id, rule.patterns, tuple(p for p in rule.patterns if anchored(p)))
            for rule in rules.rules if rule.patterns
        ]
        # the prefilter must propose a prefixed line to an anchored pattern: it gets the
        # pattern without its "^" (a superset of its matches, so it stays sound)
        # ... and the lines an anchored pattern reads repaired (line_prefix.message_starts:
        # an exception line several ranks wrote into each other, an IPython header)
        probe = list(REPAIR_PROBES) if any(at_start for _, _, at_start in self._rules) else []
        self._prefilter = make_prefilter([unanchored(p) for _, patterns, _ in self._rules
                                          for p in patterns] + probe)
        self._any_patterns = bool(self._rules)
        self._may_match = self._prefilter.may_match
        self._lines: dict[str, int] = {}
        self._after_byte: dict[str, int] = {}
        self._seq = 0
        self._first: dict[str, list[LogHit]] = {}
        self._last: dict[str, deque[LogHit]] = {}

    def feed(self, line: str, stream: str = "stdout") -> LogHit | None:
        """Scan one line; return the hit of the highest-precedence rule, if any."""
        lines = self._lines
        lineno = lines[stream] = lines.get(stream, 0) + 1
        if "\x1b" in line:
            line = strip_ansi(line)
        if not self._may_match(line):
            return None
        return self._match_line(line.rstrip("\r\n"), stream, lineno)

    def mark_gap(self, resume_at: int, stream: str = "stdout") -> None:
        """Bytes of ``stream`` went by unseen; the next line starts at byte ``resume_at``.

        Lines cannot be counted across such a gap, so numbering restarts there: later hits
        carry ``after_byte`` and a line number relative to it (both exact)."""
        self._after_byte[stream] = resume_at
        self._lines[stream] = 0

    def skip_lines(self, count: int, stream: str = "stdout") -> None:
        """Advance ``stream``'s line count past ``count`` lines that were not scanned."""
        self._lines[stream] = self._lines.get(stream, 0) + count

    def feed_text(self, text: str, stream: str = "stdout") -> int:
        """Scan a block of whole lines at once (same result as feeding each line).

        The last line may or may not end with a newline; ``""`` is one empty line.

        The prefilter runs over the whole chunk in C; Python only touches the lines
        it accepts. Returns the number of lines in the chunk.
        """
        base = self._lines.get(stream, 0)
        if "\x1b" in text:
            text = strip_ansi(text)
        # "a\nb" and "a\nb\n" are both two lines; "" is one empty line
        lines_in_chunk = text.count("\n") + (0 if text.endswith("\n") else 1)
        self._lines[stream] = base + lines_in_chunk
        if not self._any_patterns:
            return lines_in_chunk
        starts = sorted({text.rfind("\n", 0, pos) + 1 for pos in self._prefilter.candidates(text)})
        counted_to, counted = 0, 0
        for start in starts:
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            counted += text.count("\n", counted_to, start)
            counted_to = start
            self._match_line(text[start:end].rstrip("\r"), stream, base + counted + 1)
        return lines_in_chunk

    def _match_line(self, line: str, stream: str, lineno: int) -> LogHit | None:
        first: LogHit | None = None
        starts: list[tuple[int, str]] | None = None  # other message starts, computed once
        for rule_id, patterns, at_start in self._rules:
            found = next((m for m in (p.search(line) for p in patterns) if m is not None), None)
            at = 0 if found is None else found.start()
            if found is None and at_start:
                if starts is None:
                    starts = message_starts(line)
                for offset, rest in starts:
                    found = next((m for m in (p.search(rest) for p in at_start) if m is not None), None)
                    if found is not None:
                        at = offset + found.start()
                        break
            if found is not None:
                hit = LogHit(rule_id=rule_id, stream=stream, lineno=lineno,
                             text=_window(line, at), seq=self._seq,
                             after_byte=self._after_byte.get(stream))
                self._seq += 1
                self._store(hit)
                first = first or hit
        return first

    def _store(self, hit: LogHit) -> None:
        first = self._first.setdefault(hit.rule_id, [])
        if len(first) < KEEP_PER_RULE:
            first.append(hit)
            return
        self._last.setdefault(hit.rule_id, deque(maxlen=KEEP_PER_RULE)).append(hit)

    @property
    def hits(self) -> tuple[LogHit, ...]:
        """Kept hits of every rule (first N + last N each), in the order they were seen."""
        kept = [h for hits in self._first.values() for h in hits]
        kept += [h for hits in self._last.values() for h in hits]
        return tuple(sorted(kept, key=lambda h: h.seq))

    def lines_seen(self, stream: str = "stdout") -> int:
        return self._lines.get(stream, 0)
