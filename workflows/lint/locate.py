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


class LineMapper:
    def __init__(self, rendered_text: str, source_text: str, workflow_line: int) -> None:
        self._source = source_text.splitlines()[max(workflow_line - 1, 0) :]
        self._rendered = rendered_text.splitlines()
        self._first = workflow_line
        matcher = difflib.SequenceMatcher(None, self._rendered, self._source, autojunk=False)
        self._exact: dict[int, int] = {}
        for block in matcher.get_matching_blocks():
            for k in range(block.size):
                self._exact[block.a + k] = block.b + k
        self._anchors = sorted(self._exact)

    def source_line(self, rendered_line: int) -> int:
        """1-based source line for a 1-based line of the rendered text."""
        index = rendered_line - 1
        if index in self._exact:
            return self._exact[index] + self._first
        estimate = self._estimate(index)
        text = self._rendered[index] if 0 <= index < len(self._rendered) else ""
        candidates = [i for i, line in enumerate(self._source) if line == text]
        if not candidates and _shape(text) is not None:
            candidates = [i for i, line in enumerate(self._source) if _shape(line) == _shape(text)]
        if candidates:
            estimate = min(candidates, key=lambda i: (abs(i - estimate), i))
        return min(max(estimate, 0), max(len(self._source) - 1, 0)) + self._first

    def _estimate(self, index: int) -> int:
        position = bisect_right(self._anchors, index) - 1
        if position < 0:
            return index
        anchor = self._anchors[position]
        return self._exact[anchor] + (index - anchor)
