"""Forward one output stream of the supervised command and split it into lines.

Each chunk is written to the wrapper's own stream as soon as it is read, unchanged
(bytes, no re-encoding, no buffering for line ends); only then is it split into lines
for the scanner and the bounded tail. Lines are decoded with ``errors="replace"`` for
scanning only. A line longer than ``MAX_LINE_BYTES`` is scanned by its prefix (the
rest is skipped up to the next newline) so a binary blob cannot grow memory.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable

MAX_LINE_BYTES = 64 * 1024
TAIL_LINE_CHARS = 4096
_READ_SIZE = 256 * 1024

FeedLines = Callable[[list[str], str], None]


class LineSink:
    """A pump thread: read ``source_fd`` -> write ``target_fd`` -> feed lines."""

    def __init__(
        self, stream: str, source_fd: int, target_fd: int, feed: FeedLines, tail_lines: int
    ) -> None:
        self.stream = stream
        self._source_fd = source_fd
        self._target_fd = target_fd
        self._feed = feed
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._carry = b""
        self._skipping = False  # inside an over-long line: drop bytes up to its newline
        self._target_ok = True
        self._scanning = True
        self.lines_seen = 0  # read by the watch loop as output progress
        self._thread = threading.Thread(target=self._pump, name=f"resched-{stream}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def tail(self) -> tuple[str, ...]:
        return tuple(self._tail)

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self._source_fd, _READ_SIZE)
            except OSError:
                break
            if not chunk:
                break
            self._forward(chunk)
            self._split(chunk)
        if self._carry:
            self._emit(self._carry)
            self._carry = b""

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

    def _write_note(self, text: str) -> None:
        try:
            os.write(2, text.encode())
        except OSError:
            pass

    def _split(self, chunk: bytes) -> None:
        if self._skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                return
            self._skipping = False
            chunk = chunk[newline + 1:]
        data = self._carry + chunk if self._carry else chunk
        last_newline = data.rfind(b"\n")
        if last_newline < 0:
            self._carry = data
        else:
            self._carry = data[last_newline + 1:]
            self._emit(data[:last_newline])
        if len(self._carry) > MAX_LINE_BYTES:
            self._emit(self._carry[:MAX_LINE_BYTES])
            self._carry = b""
            self._skipping = True

    def _emit(self, block: bytes) -> None:
        # One decode per block: a newline byte never occurs inside a UTF-8 sequence.
        lines = block.decode("utf-8", "replace").split("\n")
        lines = [line[:MAX_LINE_BYTES].rstrip("\r") for line in lines]
        if self._scanning:
            try:
                self._feed(lines, self.stream)
            except Exception as error:  # noqa: BLE001 - forwarding must go on regardless
                self._scanning = False
                self._write_note(f"resched: warning: log scanning of {self.stream} stopped: "
                                 f"{type(error).__name__}: {error}\n")
        if self._tail.maxlen:
            self._tail.extend(line[:TAIL_LINE_CHARS] for line in lines[-self._tail.maxlen:])
        self.lines_seen += len(lines)
