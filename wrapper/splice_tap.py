"""Forward an output burst pipe -> target with splice, keeping its end in a side pipe.

Used by :class:`wrapper.linesink.LineSink` while the command writes faster than the
scanner reads. Each round ``tee(2)`` duplicates what the command's pipe holds into a
private side pipe, then ``splice(2)`` moves exactly those bytes on to the target: no
byte is copied into Python. When more is waiting than ``TEE_BYTES``, all but the newest
``TEE_BYTES`` are moved on first without tee. The side pipe keeps the burst's most recent
bytes (at least ``TEE_BYTES``, up to its capacity); when it fills, its oldest bytes are
spliced to /dev/null.
The caller reads the side pipe when the burst ends (or to take a sample) and scans it.

Per target, splice falls back to read/write when the target refuses spliced pages
(EINVAL: a terminal, an O_APPEND file); a target that is gone (EPIPE) is replaced by
/dev/null so the command keeps writing and never gets SIGPIPE. Byte order is kept: only
this thread reads the command's pipe, and tee and splice both take from its head.
"""

from __future__ import annotations

import errno
import os
import select
import time
from collections.abc import Callable, Iterator

from wrapper.zerocopy import (
    SPLICE_F_MOVE,
    SPLICE_F_NONBLOCK,
    may_splice_into,
    pending_bytes,
    pipe_size,
    tee,
)

SIDE_PIPE_BYTES = 1024 * 1024
# A round that finds more than this waiting moves all but this much without tee: in a
# long burst only the newest bytes can stay in the side pipe anyway, and duplicating
# every byte (tee, then discarding it) cost more than moving it.
TEE_BYTES = 256 * 1024
# A mid-burst sample scans this much (the newest bytes); scanning the whole side pipe
# every 64 MiB cost ~0.15 s of CPU per GiB with the real feed.
SAMPLE_BYTES = 64 * 1024
_COPY_BYTES = 64 * 1024
# The target takes no spliced pages: write them instead (kernel-, fs- and device-specific).
_NO_SPLICE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF})
_WRITABLE_WAIT_S = 1.0
# Coalescing: in a burst, a wake-up for a few KiB costs more than the bytes it moves (a
# context switch on a box whose cores the command and its reader already use). When the
# pipe holds less than this, let it fill a moment longer; at 1 GB/s, 0.3 ms is ~300 KB,
# well under the 1 MiB pipe, so the command never blocks on it. Latency: 0.3 ms.
COALESCE_BYTES = 128 * 1024
COALESCE_S = 0.0003


def readable_within(fd: int, seconds: float) -> bool:
    try:
        readable, _, _ = select.select([fd], [], [], seconds)
    except (OSError, ValueError):
        return False
    return bool(readable)


class SpliceTap:
    """One stream's zero-copy forwarder; create once, reuse for every burst, then close."""

    def __init__(self, source_fd: int, target_fd: int, *, target_ok: bool = True,
                 side_bytes: int = SIDE_PIPE_BYTES) -> None:
        self._source = source_fd
        self._target = target_fd
        self._side_r, self._side_w = os.pipe()
        self._null = -1
        try:
            self._side_cap = pipe_size(self._side_w, side_bytes)
            self._null = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            self.close()
            raise
        self.target_splices = may_splice_into(target_fd)
        self.target_ok = target_ok
        self.moved = 0  # bytes taken from the source (forwarded, or drained once the target is gone)
        self.side_held = 0  # bytes in the side pipe: the last ones moved
        self.discarded = 0  # bytes dropped from the side pipe unread

    def close(self) -> None:
        for fd in (self._side_r, self._side_w, self._null):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._side_r = self._side_w = self._null = -1

    def forward_burst(self, sample: Callable[[], None], *, quiet_s: float,
                      sample_every: int) -> bool:
        """Forward until the source stays empty for ``quiet_s`` (False) or ends (True).

        ``sample`` is called after every ``sample_every`` bytes, with the side pipe full
        of the latest ones. OSError: the source itself refuses tee or splice."""
        since_sample = 0
        keep = self._side_cap // 2
        while True:
            ahead = pending_bytes(self._source) - TEE_BYTES
            if ahead > 0:
                # More is waiting than the side pipe keeps: only the newest ``keep`` bytes
                # can end up there, so move the rest straight on without duplicating it
                # (tee, then discarding, cost page operations for every byte: the 1 MiB
                # writes case ran at 0.7 of a bare splice forwarder). What the side pipe
                # held is no longer contiguous with what comes next: drop it.
                self._discard(self.side_held)
                self._move(ahead)
                since_sample += ahead
            elif self.side_held > keep:
                self._discard(self.side_held - keep)
            try:
                count = tee(self._source, self._side_w, self._side_cap - self.side_held,
                            SPLICE_F_NONBLOCK)
            except InterruptedError:
                continue
            except BlockingIOError:
                if pending_bytes(self._source) > 0:
                    # The side pipe ran out of slots (many small buffers): make room.
                    self._discard(max(1, self.side_held // 2))
                    continue
                if not readable_within(self._source, quiet_s):
                    return False
                if pending_bytes(self._source) < COALESCE_BYTES:
                    time.sleep(COALESCE_S)
                continue
            if count == 0:
                return True
            self.side_held += count
            self._move(count)
            since_sample += count
            if since_sample >= sample_every:
                since_sample = 0
                self._discard(self.side_held - SAMPLE_BYTES)
                sample()

    def read_side(self) -> Iterator[bytes]:
        """The side pipe's bytes, oldest first, in chunks; it is empty afterwards."""
        while self.side_held > 0:
            try:
                chunk = os.read(self._side_r, min(self.side_held, _COPY_BYTES))
            except InterruptedError:
                continue
            if not chunk:  # cannot happen while we hold its write end; never spin
                self.side_held = 0
                return
            self.side_held -= len(chunk)
            yield chunk

    def _discard(self, count: int) -> None:
        count = min(count, self.side_held)
        while count > 0:
            try:
                dropped = os.splice(self._side_r, self._null, count)
            except InterruptedError:
                continue
            except OSError:
                dropped = len(os.read(self._side_r, min(count, _COPY_BYTES)))
            if dropped <= 0:
                self.side_held = 0
                return
            count -= dropped
            self.side_held -= dropped
            self.discarded += dropped

    def _move(self, count: int) -> None:
        """Take exactly ``count`` bytes (already in the source) to the target."""
        while count > 0:
            try:
                if not self.target_ok:
                    moved = self._drain(count)
                elif self.target_splices:
                    moved = os.splice(self._source, self._target, count, flags=SPLICE_F_MOVE)
                else:
                    moved = self._copy(count)
            except InterruptedError:
                continue
            except BlockingIOError:  # a non-blocking target that is full: wait, like write
                _writable_within(self._target, _WRITABLE_WAIT_S)
                continue
            except OSError as error:
                if self.target_splices and error.errno in _NO_SPLICE:
                    self.target_splices = False  # nothing moved: the bytes are still there
                else:
                    self.target_ok = False  # EPIPE and the like: the target is gone
                continue
            if moved <= 0:
                raise OSError(errno.EIO, "splice moved no bytes from a non-empty pipe")
            count -= moved
            self.moved += moved

    def _copy(self, count: int) -> int:
        chunk = os.read(self._source, min(count, _COPY_BYTES))
        view = memoryview(chunk)
        while view and self.target_ok:
            try:
                written = os.write(self._target, view)
            except InterruptedError:
                continue
            except BlockingIOError:
                _writable_within(self._target, _WRITABLE_WAIT_S)
                continue
            except OSError:
                self.target_ok = False
                break
            view = view[written:]
        return len(chunk)

    def _drain(self, count: int) -> int:
        try:
            return os.splice(self._source, self._null, count)
        except (BlockingIOError, InterruptedError):
            raise
        except OSError:
            return len(os.read(self._source, min(count, _COPY_BYTES)))


def _writable_within(fd: int, seconds: float) -> None:
    try:
        select.select([], [fd], [], seconds)
    except (OSError, ValueError):
        pass
