"""What resched writes for people passes one filter: credentials masked, control characters
shown escaped.

A log line can carry a secret (``AWS_SECRET_ACCESS_KEY=...`` echoed by a launcher) and
terminal control sequences (a colour code, or a cursor move that overwrites what was
printed before). Every text resched writes to stdout / stderr goes through
:func:`clean`: the CLI installs :class:`SafeStream` over both streams for the whole
command (:func:`safe_streams`), so no ``click.echo``, ``print`` or progress line can
bypass it. resched's own terminal sequences (the live progress block, a byte counter
redrawn with ``\\r``) go through :func:`write_control`; the rendered spec of ``resched
render`` goes to the raw byte stream, exact (it must equal what OSMO renders).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from wrapper.redact import redact

# C0 controls but newline and tab, DEL, C1 controls, and the Unicode bidi overrides that
# reorder what a terminal shows (a "Trojan source" line).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with every control character written as its escape (``\\x1b``, ``\\r``)."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)


def clean(text: str) -> str:
    """The one filter for text shown to people: redacted, then control characters escaped."""
    return escape_controls(redact(text))


class SafeStream:
    """A text stream whose ``write`` passes :func:`clean`; everything else is the wrapped
    stream's (``buffer`` too: raw bytes are for exact artifacts only)."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click probes binary-ness with write(b"")
            return self.raw.write(text)
        self.raw.write(clean(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def write_control(stream: TextIO, sequence: str) -> None:
    """Write resched's own terminal control ``sequence`` (cursor moves, ``\\r``) unfiltered."""
    getattr(stream, "raw", stream).write(sequence)


@contextlib.contextmanager
def safe_streams() -> Iterator[None]:
    """Route ``sys.stdout`` and ``sys.stderr`` through :class:`SafeStream` meanwhile."""
    saved = sys.stdout, sys.stderr
    sys.stdout = SafeStream(saved[0]) if not isinstance(saved[0], SafeStream) else saved[0]  # type: ignore[assignment]
    sys.stderr = SafeStream(saved[1]) if not isinstance(saved[1], SafeStream) else saved[1]  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
