"""Forward one output stream of the supervised command and split it into lines.

Each chunk is written to the wrapper's own stream as soon as it is read, unchanged
(bytes, no re-encoding, no waiting for line ends); only then is it split into lines for
the scanner and the bounded tail, a block of whole lines at a time (so the scanner runs
its prefilter over the block in C). Lines are decoded with ``errors="replace"`` for
scanning only; a line longer than ``MAX_LINE_BYTES`` is scanned by its prefix.

Forwarding never waits for the scanner. The scanner keeps up with any realistic
training log (tens of MB/s), but a burst written faster than it can scan would
otherwise throttle the command. So when output piles up in the pipe (a read fills the
whole read buffer, or ``BURST_PENDING_BYTES`` are still unread), the chunk is
forwarded and set aside; when the burst
ends (or at EOF) the last ``BURST_KEEP_BYTES`` of it are scanned, which is where a
crash's traceback and the launcher's failure summary are. Lines dropped from the
middle of a burst are still counted (line numbers stay right) and reported as
``unscanned_lines`` / ``unscanned_bytes``; one chunk in every ``SAMPLE_EVERY_BYTES`` of
a long burst is scanned anyway (a sample of what scrolled by). Memory stays flat
whatever the output's shape: the burst keeps at most ``BURST_KEEP_BYTES``, a line at
most ``MAX_LINE_BYTES``, and skipped lines only advance a counter (``SkipLines``),
never build a string.

Zero copy (Linux): a burst is forwarded with ``splice(2)``, pipe to target, without
passing through Python at all, and ``tee(2)`` keeps a copy of its most recent bytes in a
private side pipe (``SIDE_PIPE_BYTES``; its oldest bytes are spliced to /dev/null when it
fills). When the burst ends, the side pipe is read and scanned: the traceback is there.
Bytes that went by unseen cannot have their newlines counted, so line numbers after such
a gap are not numbers from the stream's start: the feed's ``mark_gap`` is told the exact
byte offset where counting starts again (the first whole line after the gap), hits
after it are numbered from there, and ``unscanned_lines`` becomes unknown
(``line_numbers_exact`` False); ``unscanned_bytes`` stays exact. Output progress for the
hang detector is ``bytes_forwarded``, which a splice burst advances too. Without
``mark_gap``, without splice (other systems, ``RESCHED_NO_SPLICE=1``) or for a target
that refuses spliced pages (a terminal, an O_APPEND file: EINVAL), bursts take the
read/write path above, whose line counts stay exact.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable

from wrapper.splice_tap import SpliceTap, readable_within
from wrapper.zerocopy import pending_bytes, pipe_size, zero_copy_available

MAX_LINE_BYTES = 64 * 1024
TAIL_LINE_CHARS = 4096
BURST_PENDING_BYTES = 256 * 1024
BURST_KEEP_BYTES = 4 * 1024 * 1024
BURST_QUIET_S = 0.05
SAMPLE_EVERY_BYTES = 64 * 1024 * 1024
# Without a SkipLines callback, skipped lines reach the scanner as this many empty lines
# at a time: bounded memory for a feed that can only count newlines.
_SKIP_BATCH_LINES = 64 * 1024
PIPE_BYTES = 1024 * 1024
# 64 KiB reads overlap reading with the command's writing; 1 MiB reads measured slower.
_READ_SIZE = 64 * 1024

# Receives whole lines, each ended by "\n" (LineScanner.feed_text's convention: the line
# count is the number of newlines), and the stream name.
FeedText = Callable[[str, str], None]
# Advances a stream's line count by this many lines that were not scanned.
SkipLines = Callable[[int, str], None]
# Unseen bytes went by: line counting restarts at this byte offset of the stream.
MarkGap = Callable[[int, str], None]


def enlarge_pipe(fd: int) -> None:
    """Fewer, larger reads: a 1 MiB pipe instead of 64 KiB (Linux; best effort)."""
    if sys.platform.startswith("linux"):
        pipe_size(fd, PIPE_BYTES)


class LineSink:
    """A pump thread: read ``source_fd`` -> write ``target_fd`` -> feed lines."""

    def __init__(
        self, stream: str, source_fd: int, target_fd: int, feed: FeedText, tail_lines: int,
        skip: SkipLines | None = None, gap: MarkGap | None = None,
        zero_copy: bool | None = None,
    ) -> None:
        self.stream = stream
        self._source_fd = source_fd
        self._target_fd = target_fd
        self._feed = feed
        self._skip_lines = skip
        self._tail_lines = tail_lines
        self._tail_blocks: deque[tuple[bytes, int]] = deque()
        self._tail_count = 0
        self._carry = b""
        self._skipping = False  # inside an over-long line: drop bytes up to its newline
        self._target_ok = True
        self._scanning = True
        self._burst: deque[bytes] = deque()
        self._burst_bytes = 0
        self.unscanned_lines = 0
        self.unscanned_bytes = 0
        self.sampled_chunks = 0
        self._since_sample = 0
        self._unfed_lines = 0
        # Zero copy needs a feed that can be told where line numbers restart.
        self._mark_gap = gap
        self._zero_copy = gap is not None and (
            zero_copy_available() if zero_copy is None else zero_copy)
        self._tap: SpliceTap | None = None
        self._read_bytes = 0  # forwarded through Python (the tap counts its own)
        self._scanned_to = 0  # stream offset up to which every byte reached _split
        self._split_offset = 0  # stream offset of the next byte _split gets (after a gap)
        self._gap_open = False  # skipping the rest of a line whose start went by unseen
        self.line_numbers_exact = True
        self._thread = threading.Thread(target=self._pump, name=f"resched-{stream}", daemon=True)

    @property
    def bytes_forwarded(self) -> int:
        """Bytes taken from the command so far: the watch loop's output progress."""
        return self._read_bytes + (self._tap.moved if self._tap is not None else 0)

    @property
    def unscanned_line_count(self) -> int | None:
        """Lines forwarded unscanned; None once unseen bytes went by (not countable)."""
        return self.unscanned_lines if self.line_numbers_exact else None

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def tail(self) -> tuple[str, ...]:
        """The last ``tail_lines`` lines (a final partial line included), decoded."""
        if self._tail_lines <= 0:
            return ()
        raw = b"".join(block for block, _ in self._tail_blocks).split(b"\n")[:-1]
        return tuple(line[:TAIL_LINE_CHARS].decode("utf-8", "replace").rstrip("\r")
                     for line in raw[-self._tail_lines:])

    def _pump(self) -> None:
        enlarge_pipe(self._source_fd)
        try:
            self._pump_all()
        finally:
            if self._tap is not None:
                self._tap.close()

    def _pump_all(self) -> None:
        while True:
            try:
                chunk = os.read(self._source_fd, _READ_SIZE)
            except OSError:
                break
            if not chunk:
                break
            self._forward(chunk)
            self._read_bytes += len(chunk)
            full = len(chunk) == _READ_SIZE
            if self._zero_copy and not self._burst and (
                    full or pending_bytes(self._source_fd) >= BURST_PENDING_BYTES):
                self._split(chunk)  # already read: scan it, zero copy from here
                self._scanned_to = self.bytes_forwarded
                if self._splice_burst():
                    break
                continue
            # A full read means output piled up while we were busy; so does a pipe that
            # still holds a lot. Either way the command writes faster than we scan. The
            # burst lasts until the pipe stays quiet for BURST_QUIET_S.
            if (full or self._burst
                    or pending_bytes(self._source_fd) >= BURST_PENDING_BYTES):
                self._set_aside(chunk)
                if not full and not readable_within(self._source_fd, BURST_QUIET_S):
                    self._scan_burst()  # the burst is over: scan its end
            else:
                self._split(chunk)
        self._scan_burst()
        if self._carry:  # a last line without its newline
            self._emit(self._carry + b"\n")
            self._carry = b""
        self._feed_unfed_lines()

    def _splice_burst(self) -> bool:
        """Forward a burst with splice, then scan what the side pipe kept; True at EOF."""
        if self._tap is None:
            try:
                self._tap = SpliceTap(self._source_fd, self._target_fd, target_ok=self._target_ok)
            except OSError:
                self._zero_copy = False  # no fds left for a side pipe: read/write it is
                return False
        tap = self._tap
        tap.target_ok = self._target_ok
        try:
            eof = tap.forward_burst(self._sample_side, quiet_s=BURST_QUIET_S,
                                    sample_every=SAMPLE_EVERY_BYTES)
        except OSError:
            # The command's pipe refuses tee or splice (no such kernel support): the
            # read/write path from here on; nothing was lost, the accounting still holds.
            self._zero_copy, eof = False, False
        self._target_ok = tap.target_ok
        self._scan_side()
        return eof

    def _sample_side(self) -> None:
        self.sampled_chunks += 1
        self._scan_side()

    def _scan_side(self) -> None:
        tap = self._tap
        if tap is None:
            return
        side_start = self.bytes_forwarded - tap.side_held
        if side_start > self._scanned_to:
            self._open_gap(side_start - self._scanned_to, side_start)
        for chunk in tap.read_side():
            self._split(chunk)
        self._scanned_to = self.bytes_forwarded

    def _open_gap(self, unseen: int, resume_at: int) -> None:
        # The side pipe starts inside a line whose beginning went by unseen: drop up to
        # its newline; the feed learns where counting restarts when that newline is found.
        self.unscanned_bytes += unseen
        self.line_numbers_exact = False
        self._carry, self._skipping, self._gap_open = b"", True, True
        self._split_offset = resume_at
        self._tail_blocks.clear()  # the tail must not run across a gap
        self._tail_count = 0

    def _notify_gap(self, resume_at: int) -> None:
        if self._mark_gap is None or not self._scanning:
            return
        try:
            self._mark_gap(resume_at, self.stream)
        except Exception as error:  # noqa: BLE001 - forwarding must go on regardless
            self._stop_scanning(error)

    def _forward(self, chunk: bytes) -> None:
        if not self._target_ok:
            return
        view = memoryview(chunk)
        while view:
            try:
                written = os.write(self._target_fd, view)
            except InterruptedError:
                continue
            except OSError:
                # Our own stdout is gone (closed pipe): keep draining and scanning so the
                # command is not blocked or killed by SIGPIPE; the output has nowhere to go.
                self._target_ok = False
                return
            view = view[written:]

    def _set_aside(self, chunk: bytes) -> None:
        self._burst.append(chunk)
        self._burst_bytes += len(chunk)
        while self._burst_bytes - len(self._burst[0]) >= BURST_KEEP_BYTES:
            oldest = self._burst.popleft()
            self._burst_bytes -= len(oldest)
            self._since_sample += len(oldest)
            if self._since_sample >= SAMPLE_EVERY_BYTES:
                self._since_sample = 0
                self.sampled_chunks += 1
                self._split(oldest)  # in order, so its line numbers are right
            else:
                self._skip(oldest)

    def _skip(self, chunk: bytes) -> None:
        """Count the lines of a chunk that will not be scanned (cheap: no decode, no copy)."""
        self.unscanned_bytes += len(chunk)
        if self._skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                return
            self._skipping = False
            chunk = chunk[newline + 1:]
        complete = chunk.count(b"\n")
        if complete == 0:
            if len(self._carry) + len(chunk) > MAX_LINE_BYTES:
                self._count_unscanned(1)  # an over-long line: count it now, drop the rest
                self._carry, self._skipping = b"", True
            else:
                self._carry += chunk
            return
        # The burst's last BURST_KEEP_BYTES are scanned (and kept for the tail) when it
        # ends; lines before a skipped chunk would only make the tail lie about a gap.
        self._tail_blocks.clear()
        self._tail_count = 0
        self._count_unscanned(complete)
        self._carry = chunk[chunk.rfind(b"\n") + 1:]

    def _count_unscanned(self, lines: int) -> None:
        self._unfed_lines += lines
        self.unscanned_lines += lines

    def _feed_unfed_lines(self) -> None:
        # Unscanned lines still advance the scanner's line numbers, in order, before the
        # next scanned block: as empty lines, which match no rule (one byte each).
        # A counter when the feed can skip; else bounded batches of empty lines, never one
        # string of them all (a burst of `yes` is half a billion lines per GiB).
        unfed, self._unfed_lines = self._unfed_lines, 0
        if not unfed or not self._scanning:
            return
        if self._skip_lines is not None:
            try:
                self._skip_lines(unfed, self.stream)
            except Exception as error:  # noqa: BLE001 - forwarding must go on regardless
                self._stop_scanning(error)
            return
        batch = "\n" * min(unfed, _SKIP_BATCH_LINES)
        while unfed > 0 and self._scanning:
            take = min(unfed, _SKIP_BATCH_LINES)
            self._safe_feed(batch if take == len(batch) else batch[:take])
            unfed -= take

    def _scan_burst(self) -> None:
        while self._burst:
            chunk = self._burst.popleft()
            self._split(chunk)
        self._burst_bytes = 0

    def _write_note(self, text: str) -> None:
        try:
            os.write(2, text.encode())
        except OSError:
            pass

    def _split(self, chunk: bytes) -> None:
        offset = self._split_offset
        self._split_offset += len(chunk)
        if self._skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                return
            self._skipping = False
            if self._gap_open:
                self._gap_open = False
                self._notify_gap(offset + newline + 1)
            chunk = chunk[newline + 1:]
        data = self._carry + chunk if self._carry else chunk
        last_newline = data.rfind(b"\n")
        if last_newline < 0:
            self._carry = data
        else:
            self._carry = data[last_newline + 1:]
            self._emit(data[:last_newline + 1])
        if len(self._carry) > MAX_LINE_BYTES:
            self._emit(self._carry[:MAX_LINE_BYTES] + b"\n")
            self._carry = b""
            self._skipping = True

    def _emit(self, block: bytes) -> None:
        """Scan a block of whole lines, each ended by a newline."""
        count = block.count(b"\n")
        self._feed_unfed_lines()
        if self._scanning:
            # One decode per block: a newline byte never occurs inside a UTF-8 sequence.
            self._safe_feed(block.decode("utf-8", "replace"))
        self._keep_for_tail(block, count)

    def _keep_for_tail(self, block: bytes, count: int) -> None:
        # Raw blocks, decoded only when the tail is asked for: no per-line work here.
        blocks = self._tail_blocks
        if count == 1 and len(block) > TAIL_LINE_CHARS * 4:
            # The tail shows a line's first TAIL_LINE_CHARS only: keep no more (UTF-8
            # takes at most 4 bytes a character), so 200 long lines stay small.
            block = block[:TAIL_LINE_CHARS * 4] + b"\n"
        blocks.append((block, count))
        self._tail_count += count
        while len(blocks) > 1 and self._tail_count - blocks[0][1] >= self._tail_lines:
            self._tail_count -= blocks.popleft()[1]

    def _safe_feed(self, text: str) -> None:
        try:
            self._feed(text, self.stream)
        except Exception as error:  # noqa: BLE001 - forwarding must go on regardless
            self._stop_scanning(error)

    def _stop_scanning(self, error: Exception) -> None:
        self._scanning = False
        self._write_note(f"resched: warning: log scanning of {self.stream} stopped: "
                         f"{type(error).__name__}: {error}\n")
