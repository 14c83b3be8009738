"""Traceback blocks that a header line opens: CPython's ``Exception ignored in: <object>``
(``sys.unraisablehook``) and threading's ``Exception in thread NAME:``
(``threading.excepthook``). Each is followed by a traceback and closed by its exception
line; what it reports did not end the process (an ignored exception, a thread that died).

Sources: CPython Python/errors.c (``write_unraisable_exc``), Lib/threading.py
(``excepthook``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from wrapper.classifier.launcher_logs import EXCEPTION_LINE
from wrapper.classifier.line_prefix import search
from wrapper.classifier.scanner import LogHit

_MAX_BLOCK_LINES = 200  # a traceback longer than this is cut off: the block ends there
_TRACEBACK = "Traceback (most recent call last):"
_OPEN_WITHIN = 3  # lines after its header within which a cut block's traceback opens


def inside_blocks(hits: Sequence[LogHit], header_ids: Collection[str]) -> set[int]:
    """The ``id()`` of every hit inside a block opened by a hit of ``header_ids``: from the
    header to the exception line that closes its traceback (the first hit after it that is
    one; the N-th for a header line that N threads wrote at once), on the same stream. The
    headers themselves are not included."""
    inside: set[int] = set()
    for start in (hit for hit in hits if hit.rule_id in header_ids):
        later = sorted((h for h in hits if h.stream == start.stream and h.seq > start.seq
                        and start.lineno < h.lineno <= start.lineno + _MAX_BLOCK_LINES
                        and h.rule_id not in header_ids), key=lambda h: h.seq)
        # threads that died at once may write their headers onto one line: each closes
        # its own traceback, so the block ends at as many exception lines
        closers = [h for h in later if search(EXCEPTION_LINE, h.text)]
        reports = max(1, start.text.count("Exception in thread"))
        closing = closers[min(reports, len(closers)) - 1] if closers else None
        # without its exception line (the log was cut inside the traceback) the block is
        # still the traceback that opens right after the header, whose header alone is
        # known: on the next line, or a line or two further when threads that died at
        # once wrote their reports into each other ("Exception in thread Exception in
        # thread B:", then A's ":", then both "Traceback" lines)
        opened = [h.lineno for h in later
                  if start.lineno < h.lineno <= start.lineno + _OPEN_WITHIN and _TRACEBACK in h.text]
        end = closing.lineno if closing is not None else max(opened, default=start.lineno)
        inside.update(id(h) for h in later if h.lineno <= end)
    return inside
