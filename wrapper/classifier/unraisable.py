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

from wrapper.classifier.blocks import inside_blocks
from wrapper.classifier.rules import RuleSet
from wrapper.classifier.scanner import LogHit
from wrapper.classifier.success import marked

IGNORED_RULE = "exception-ignored"


def without_ignored(rules: RuleSet, hits: Sequence[LogHit]) -> list[LogHit]:
    """``hits`` without those inside an ``Exception ignored`` block: from that line to the
    exception line that closes its traceback (the first hit after it that is one), on
    the same stream."""
    dropped = inside_blocks(hits, marked(rules, "ignored"))
    # ... except a line that only an exiting interpreter prints (a module global already
    # torn down to None, process-exited's): what it says is when, not what failed
    exiting = marked(rules, "exit")
    return [hit for hit in hits if id(hit) not in dropped or hit.rule_id in exiting]
