"""Exceptions Python reports and ignores: not what ended the process.

CPython cannot raise an exception out of a finalizer (``__del__``), a weakref or atexit
callback, a ctypes callback or a thread being shut down; it hands it to
``sys.unraisablehook``, whose default prints ``Exception ignored in: <object>`` (3.13
also ``Exception ignored while ...`` / ``Exception ignored on ...``), the traceback and the
exception line, and goes on. The exit status is not changed by it. Such a block is a
common sight at the end of a finished training (a DataLoader iterator's ``__del__``
during interpreter shutdown), so its exception line must not be read as the failure:
its hits are dropped before the rules weigh the evidence.

Source: CPython Python/errors.c (``PyErr_WriteUnraisable``, ``write_unraisable_exc``),
docs.python.org/3/library/sys.html#sys.unraisablehook.
"""

from __future__ import annotations

from collections.abc import Sequence

from wrapper.classifier.launcher_logs import EXCEPTION_LINE
from wrapper.classifier.line_prefix import search
from wrapper.classifier.rules import RuleSet
from wrapper.classifier.scanner import LogHit
from wrapper.classifier.success import marked

IGNORED_RULE = "exception-ignored"
_MAX_BLOCK_LINES = 200  # a traceback longer than this is cut off: the block ends there


def without_ignored(rules: RuleSet, hits: Sequence[LogHit]) -> list[LogHit]:
    """``hits`` without those inside an ``Exception ignored`` block: from that line to the
    exception line that closes its traceback (the first hit after it that is one), on
    the same stream."""
    ignored_ids = marked(rules, "ignored")
    starts = [hit for hit in hits if hit.rule_id in ignored_ids]
    if not starts:
        return list(hits)
    dropped: set[int] = set()
    for start in starts:
        later = sorted((h for h in hits if h.stream == start.stream and h.seq > start.seq
                        and start.lineno < h.lineno <= start.lineno + _MAX_BLOCK_LINES
                        and h.rule_id not in ignored_ids), key=lambda h: h.seq)
        closing = next((h for h in later if search(EXCEPTION_LINE, h.text)), None)
        end = closing.lineno if closing is not None else start.lineno
        dropped.update(id(h) for h in later if h.lineno <= end)
    return [hit for hit in hits if id(hit) not in dropped]
