"""Map a line of the rendered workflow back to the template line that produced it.

Rendering changes line numbers (a Jinja loop repeats its body, ``{%- if %}`` removes
lines), so ``rendered line + offset`` can point past the end of the file. Lines that
rendering left untouched are aligned exactly (difflib); any other line maps to the
nearest source line with the same text, else with the same indentation and key (the
loop body's ``- name: {{ ... }}`` for every iteration's ``- name: worker_N``).
"""

from __future__ import annotations

import difflib
import re
from bisect import bisect_right

_KEY = re.compile(r"^(\s*(?:- )?)([^:#]*?):(?:\s|$)")


def _shape(line: str) -> tuple[str, str] | None:
    match = _KEY.match(line)
    return (match.group(1), match.group(2).strip()) if match else None


# Above this many line pairs the exact alignment of the changed middle would take
# seconds (difflib is quadratic there); difflib's own junk heuristic then keeps it fast.
_EXACT_PAIRS = 4_000_000


class LineMapper:
    def __init__(self, rendered_text: str, source_text: str, workflow_line: int) -> None:
        self._source = source_text.splitlines()[max(workflow_line - 1, 0) :]
        self._rendered = rendered_text.splitlines()
        self._first = workflow_line
        self._exact: dict[int, int] = {}
        # The common head and tail align in linear time (a spec without templating is
        # all head): only the middle goes to difflib. A 5 MB spec of 75k tasks took
        # minutes in one SequenceMatcher over every line.
        rendered, source = self._rendered, self._source
        head = 0
        while head < min(len(rendered), len(source)) and rendered[head] == source[head]:
            self._exact[head] = head
            head += 1
        tail = 0
        while (tail < min(len(rendered), len(source)) - head
               and rendered[-1 - tail] == source[-1 - tail]):
            self._exact[len(rendered) - 1 - tail] = len(source) - 1 - tail
            tail += 1
        middle_a = rendered[head:len(rendered) - tail]
        middle_b = source[head:len(source) - tail]
        if middle_a and middle_b:
            matcher = difflib.SequenceMatcher(
                None, middle_a, middle_b,
                autojunk=len(middle_a) * len(middle_b) > _EXACT_PAIRS)
            for block in matcher.get_matching_blocks():
                for k in range(block.size):
                    self._exact[head + block.a + k] = head + block.b + k
        self._anchors = sorted(self._exact)
        self._by_text: dict[str, list[int]] = {}
        self._by_shape: dict[tuple[str, str], list[int]] = {}
        for i, line in enumerate(source):  # ascending: each list is sorted
            self._by_text.setdefault(line, []).append(i)
            shape = _shape(line)
            if shape is not None:
                self._by_shape.setdefault(shape, []).append(i)

    def source_line(self, rendered_line: int) -> int:
        """1-based source line for a 1-based line of the rendered text."""
        index = rendered_line - 1
        if index in self._exact:
            return self._exact[index] + self._first
        estimate = self._estimate(index)
        text = self._rendered[index] if 0 <= index < len(self._rendered) else ""
        candidates = self._by_text.get(text)
        shape = _shape(text)
        if not candidates and shape is not None:
            candidates = self._by_shape.get(shape)
        if candidates:
            estimate = _nearest(candidates, estimate)
        return min(max(estimate, 0), max(len(self._source) - 1, 0)) + self._first

    def _estimate(self, index: int) -> int:
        position = bisect_right(self._anchors, index) - 1
        if position < 0:
            return index
        anchor = self._anchors[position]
        return self._exact[anchor] + (index - anchor)


def _nearest(sorted_lines: list[int], target: int) -> int:
    """The line of ``sorted_lines`` closest to ``target`` (the lower one on a tie)."""
    position = bisect_right(sorted_lines, target)
    around = sorted_lines[max(position - 1, 0):position + 1]
    return min(around, key=lambda i: (abs(i - target), i))
