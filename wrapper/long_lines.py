"""Read a saved log in blocks of whole lines, each line cut to a bounded length.

``resched classify`` used to glue every read onto the unfinished line before it: a
1 GiB line was copied over and over (75 s), then held whole (MemoryError, exit 70).
Here a line longer than ``MAX_LINE_CHARS`` keeps its first ``MAX_LINE_CHARS``
characters and the rest is dropped unread by the scanner, as the wrapper's live
scanner does (``wrapper.linesink.MAX_LINE_BYTES``): time stays linear in the file and
memory bounded by the block size, whatever the lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from wrapper.linesink import MAX_LINE_BYTES

MAX_LINE_CHARS = MAX_LINE_BYTES
_TOO_LONG = re.compile("[^\n]{%d}" % (MAX_LINE_CHARS + 1))


def capped_blocks(read: Callable[[int], str], block_chars: int,
                  max_line: int = MAX_LINE_CHARS) -> Iterator[str]:
    """Blocks of whole lines (each ending in ``\\n`` but maybe the last) read through
    ``read(n)``, every line cut to ``max_line`` characters; line count unchanged."""
    too_long = _TOO_LONG if max_line == MAX_LINE_CHARS else re.compile("[^\n]{%d}" % (max_line + 1))
    pending: list[str] = []  # the start of an unfinished line (at most max_line chars)
    pending_len = 0
    while True:
        chunk = read(block_chars)
        if not chunk:
            if pending:
                yield "".join(pending)
            return
        cut = chunk.rfind("\n") + 1
        if cut == 0:  # no line ends in this chunk: keep what fits of the unfinished line
            room = max_line - pending_len
            if room > 0:
                pending.append(chunk[:room])
                pending_len += min(room, len(chunk))
            continue
        head = chunk[:cut]
        if pending:
            first_end = head.find("\n")
            room = max_line - pending_len
            head = "".join(pending) + head[:min(first_end, max(room, 0))] + head[first_end:]
        if too_long.search(head):
            head = "\n".join(line[:max_line] for line in head.split("\n"))
        yield head
        rest = chunk[cut:]
        pending = [rest[:max_line]] if rest else []
        pending_len = min(len(rest), max_line)
