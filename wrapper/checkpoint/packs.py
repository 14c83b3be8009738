"""Packs: many small files stored as one blob (as restic does), written and read.

A checkpoint of 100k files of 70 B was 100k blobs: 100k creates, renames and fsyncs on
a local disk, 100k PUTs and GETs on an object store, 100k names to list and collect.
Files of at most ``PACKED_MAX`` bytes are instead concatenated into packs of about
``PACK_TARGET`` bytes. A pack is a blob like any other (content-addressed under its own
sha256, immutable, written before the manifest that names it, collected when no kept
manifest names it); a packed file's manifest entry keeps its own size and sha256 and
adds the pack and the offset (manifest format 2). Restore reads a pack's byte range
once, and checks each file's sha256 from the bytes in memory before writing it.

A publish packs only when it holds at least ``PACK_MIN_FILES`` small files: a
checkpoint of a few large files and a few small ones keeps one blob per file (format 1,
which older resched versions read).
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import NamedTuple

from wrapper.checkpoint.errors import SnapshotUnstableError
from wrapper.checkpoint.hashing import SMALL_FILE, stat_key
from wrapper.checkpoint.manifest import FileEntry, Pack
from wrapper.checkpoint.snapshot import LocalFile

PACKED_MAX = SMALL_FILE  # larger files stay single blobs (kernel copy, dedup per file)
PACK_TARGET = 4 << 20  # a pack is closed once it holds this many bytes
PACK_MIN_FILES = 16
# Files read per task of the reading pool, and tasks in flight: memory stays bounded
# (at most about READ_AHEAD batches of small files held) whatever the checkpoint's size.
BATCH_FILES = 512
READ_AHEAD = 8
RANGE_FILES = 1024  # files per restore task (one byte range of one pack)


class ReadFile(NamedTuple):
    """One small file read for packing: its bytes (None when not read: a hash-cache hit
    whose content the store already holds) and sha256. (A tuple: one per small file.)"""

    file: LocalFile
    sha256: str
    data: bytes | None
    hashed_at_ns: int


def read_small(path: str, expected_size: int) -> bytes:
    """The bytes of a small regular file, read in one go. Opened without following a
    link and without blocking (a FIFO swapped in is refused, never waited on); the file
    must keep its size and times while it is read: a file being rewritten is refused,
    never packed under a hash of other bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise SnapshotUnstableError(f"{path} is no longer a regular file")
        data = os.read(fd, before.st_size + 1) if before.st_size else b""
        while len(data) < before.st_size:  # a short read (rare on local disks)
            more = os.read(fd, before.st_size + 1 - len(data))
            if not more:
                break
            data += more
        if len(data) != expected_size or stat_key(os.fstat(fd)) != stat_key(before):
            raise SnapshotUnstableError(f"{path} changed while it was published")
        return data
    finally:
        os.close(fd)


def read_batches(pool: Executor, files: list[LocalFile], known: Callable[[LocalFile], str | None]
                 ) -> Iterator[ReadFile]:
    """Read and hash ``files`` on ``pool``, a batch per task, at most READ_AHEAD batches
    ahead of the consumer; yields in ``files`` order. ``known(file)``: the sha256 of a
    file whose content need not be read (a hash-cache hit the store already holds)."""
    def read(batch: list[LocalFile]) -> list[ReadFile]:
        out = []
        sha256 = hashlib.sha256
        for file in batch:
            sha = known(file)
            if sha is not None:
                out.append(ReadFile(file, sha, None, 0))
                continue
            hashed_at = time.time_ns()
            try:
                data = read_small(file.full, file.stat.st_size)
            except FileNotFoundError:
                raise SnapshotUnstableError(f"{file.full} vanished while it was published") \
                    from None
            out.append(ReadFile(file, sha256(data).hexdigest(), data, hashed_at))
        return out

    batches = [files[i:i + BATCH_FILES] for i in range(0, len(files), BATCH_FILES)]
    pending: list[Future[list[ReadFile]]] = []
    for batch in batches:
        pending.append(pool.submit(read, batch))
        if len(pending) > READ_AHEAD:
            yield from pending.pop(0).result()
    for future in pending:
        yield from future.result()


class PackBuilder:
    """Concatenates new small files into packs and hands each full pack to ``flush``
    (which stores it and returns its sha256); gives every file its manifest entry."""

    def __init__(self, flush: Callable[[bytes, int], str]) -> None:
        self._flush = flush
        self._chunks: list[bytes] = []
        self._size = 0
        self._pending: list[tuple[str, int, str, int]] = []  # path, size, sha, offset
        self._in_pack: dict[str, int] = {}  # sha256 -> offset in the open pack
        self.placed: dict[str, FileEntry] = {}  # sha256 -> a packed entry (for dedup)
        self.entries: list[FileEntry] = []

    def add(self, relpath: str, sha: str, data: bytes) -> None:
        offset = self._in_pack.get(sha)
        if offset is None:  # the same content twice in this pack: stored once
            offset = self._in_pack[sha] = self._size
            self._chunks.append(data)
            self._size += len(data)
        self._pending.append((relpath, len(data), sha, offset))
        if self._size >= PACK_TARGET:
            self.close_pack()

    def close_pack(self) -> None:
        if not self._pending:
            return
        pack = self._flush(b"".join(self._chunks), len(self._pending))
        for relpath, size, sha, offset in self._pending:
            entry = FileEntry(relpath, size, sha, pack, offset)
            self.entries.append(entry)
            self.placed.setdefault(sha, entry)
        self._chunks, self._size, self._pending, self._in_pack = [], 0, [], {}


def pack_ranges(entries: Iterable[FileEntry], packs: tuple[Pack, ...]
                ) -> list[tuple[Pack, list[FileEntry]]]:
    """Packed ``entries`` in restore tasks: per pack, runs of up to RANGE_FILES files in
    offset order, each run one contiguous byte range read once (several tasks per pack,
    so that a 100k-file checkpoint in two packs still uses every worker)."""
    by_pack: dict[str, list[FileEntry]] = {}
    for entry in entries:
        by_pack.setdefault(entry.pack or "", []).append(entry)
    known = {pack.sha256: pack for pack in packs}
    tasks = []
    for sha, members in by_pack.items():
        members.sort(key=lambda e: e.offset)
        tasks += [(known[sha], members[i:i + RANGE_FILES])
                  for i in range(0, len(members), RANGE_FILES)]
    return tasks
