"""sha256 of files, a local stat -> sha256 cache, and copy-while-hashing.

The cache is what makes re-publishing an unchanged tree cheap: a file whose
(device, inode, size, mtime_ns, ctime_ns) match a cached entry is not read again.
ctime cannot be set by user code, and training code writes files by tmp + rename (a new
inode), so a changed file misses the cache. The residual risk is git's "racily clean"
case: a file rewritten in place within one timestamp tick after it was hashed. Entries
hashed less than ``RACY_WINDOW_NS`` after the file's mtime are therefore not trusted.
The cache lives outside the checkpoint dir (``$RESCHED_CACHE_DIR`` or
``~/.cache/resched``), one small JSON file per directory; losing it costs a re-hash.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from wrapper.cache_dir import cache_dir

CHUNK = 8 << 20
_NO_CFR = {errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF, errno.EPERM}
RACY_WINDOW_NS = 50_000_000
_hasher_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="resched-hash")


def dir_key(directory: Path) -> str:
    return hashlib.sha256(os.fsencode(os.path.realpath(directory))).hexdigest()[:20]


def stat_key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class HashCache:
    """relative path -> (stat key, sha256, hashed-at) for one local directory."""

    def __init__(self, directory: Path, *, enabled: bool = True) -> None:
        self._file = cache_dir() / "hashes" / f"{dir_key(directory)}.json"
        self._enabled = enabled
        self._entries: dict[str, list] = {}
        self._dirty = False
        if enabled:
            try:
                loaded = json.loads(self._file.read_bytes())
                self._entries = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                self._entries = {}

    def get(self, relpath: str, st: os.stat_result) -> str | None:
        entry = self._entries.get(relpath)
        if not entry or len(entry) != 3 or entry[0] != stat_key(st):
            return None
        if entry[2] - st.st_mtime_ns < RACY_WINDOW_NS:
            return None
        return entry[1]

    def put(self, relpath: str, st: os.stat_result, sha256: str, hashed_at_ns: int) -> None:
        if not self._enabled:
            return  # never saved, never read: 100k entries would only cost time
        self._entries[relpath] = [stat_key(st), sha256, hashed_at_ns]
        self._dirty = True

    def retain(self, relpaths: set[str]) -> None:
        for stale in set(self._entries) - relpaths:
            del self._entries[stale]
            self._dirty = True

    def save(self) -> None:
        if not (self._enabled and self._dirty):
            return
        try:
            self._file.parent.mkdir(parents=True, exist_ok=True)
            unique = f"{os.getpid()}-{threading.get_ident()}"
            tmp = self._file.with_name(f"{self._file.name}.tmp-{unique}")
            tmp.write_text(json.dumps(self._entries))
            os.replace(tmp, self._file)
            self._dirty = False
        except OSError:
            pass  # a cache that cannot be written only costs a re-hash next time


def hash_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            if progress:
                progress(len(chunk))
    return digest.hexdigest()


def _kernel_copy(src_fd: int, dst_fd: int, size: int) -> int:
    """Copy ``size`` bytes in the kernel (copy_file_range: a reflink where the filesystem
    shares extents, else an in-kernel copy; sendfile as the fallback). Bytes copied."""
    done = 0
    use_cfr = hasattr(os, "copy_file_range")
    while done < size:
        try:
            count = (os.copy_file_range(src_fd, dst_fd, size - done, done, done) if use_cfr
                     else os.sendfile(dst_fd, src_fd, done, size - done))
        except OSError as error:
            # Fall back only before the first byte: copy_file_range with explicit
            # offsets leaves the target's position at 0, sendfile writes at it.
            if not use_cfr or error.errno not in _NO_CFR or done:
                raise
            use_cfr = False  # cross-device on old kernels, or a filesystem without it
            continue
        if count == 0:
            break
        done += count
    return done


_SYNC_FILE_RANGE_WRITE = 2
_libc: object | None = None


def start_writeback(fd: int) -> None:
    """Ask the kernel to start writing ``fd``'s dirty pages now, without waiting
    (sync_file_range(SYNC_FILE_RANGE_WRITE), Linux). The fsync that makes the file durable
    still comes later, before anything names it; started here, the disk writes one file
    while the next is copied and hashed, and that fsync finds less to wait for. Best
    effort: anywhere the call is missing this does nothing and fsync does all the work."""
    global _libc
    if not sys.platform.startswith("linux"):
        return
    try:
        if _libc is None:
            import ctypes  # only where it is used: start-up of the CLI stays small

            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.sync_file_range.argtypes = (ctypes.c_int, ctypes.c_longlong,
                                              ctypes.c_longlong, ctypes.c_uint)
        _libc.sync_file_range(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        _libc = False  # type: ignore[assignment]  # not available: never try again


def _digest_range(fd: int, size: int, progress: Callable[[int], None] | None) -> str:
    """sha256 of the first ``size`` bytes of ``fd`` (pread into one reused buffer; hashlib
    drops the GIL). Not mmap: a source truncated meanwhile (a training rewriting a file
    in place) would raise SIGBUS and kill the whole process; a short read is caught."""
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(min(CHUNK, max(size, 1))))
    offset = 0
    while offset < size:
        count = os.preadv(fd, [buffer[:min(len(buffer), size - offset)]], offset)
        if count == 0:
            break  # truncated: the caller's size/stat comparison refuses the file
        digest.update(buffer[:count])
        offset += count
        if progress:
            progress(count)
    return digest.hexdigest()


def copy_and_digest(src_fd: int, dst_fd: int, size: int,
                    progress: Callable[[int], None] | None = None) -> tuple[int, str]:
    """Copy the first ``size`` bytes of local ``src_fd`` to ``dst_fd`` in the kernel while
    a helper thread hashes the same bytes (pread, from the page cache); (bytes copied,
    sha256).

    Measured on the 2-core VM (benchmarks/README.md): a read-once user-space copy (read
    a chunk, hash it, write it) took 2-3x longer than this; the kernel copy costs about
    what ``cp`` costs and the hashing runs beside it. The caller checks that the source
    kept its size and times (fstat before/after): both passes then saw the same bytes.
    """
    pending = _hasher_pool.submit(_digest_range, src_fd, size, progress)
    try:
        copied = _kernel_copy(src_fd, dst_fd, size)
        start_writeback(dst_fd)
    finally:
        sha = pending.result()
    return copied, sha


# Up to this size a file is read once, hashed and written from memory in the calling
# thread: for small files the kernel copy plus a hashing thread costs more in hand-offs
# than the bytes (100k files of 70 B).
SMALL_FILE = 1 << 20


def copy_small(src_fd: int, dst_fd: int, size: int,
               progress: Callable[[int], None] | None = None) -> tuple[int, str]:
    """Copy the first ``size`` (<= SMALL_FILE) bytes of ``src_fd`` to ``dst_fd`` through
    memory; (bytes copied, sha256 of exactly those bytes)."""
    data = os.pread(src_fd, size, 0)
    view = memoryview(data)
    while view:
        view = view[os.write(dst_fd, view):]
    if progress:
        progress(len(data))
    return len(data), hashlib.sha256(data).hexdigest()


class TooLarge(ValueError):
    """A source gave more bytes than the manifest recorded (a hostile or damaged blob)."""


def copy_hashing(
    source: IO[bytes], target: IO[bytes], progress: Callable[[int], None] | None = None,
    *, limit: int | None = None,
) -> tuple[int, str]:
    """Copy file object ``source`` to ``target``: (size, sha256). While a helper thread
    hashes chunk i, this thread writes it and reads the next (hashlib drops the GIL).
    ``limit``: read at most limit+1 bytes and raise :class:`TooLarge` past it (sizes are
    capped by the manifest: an endless object never fills the disk)."""
    digest = hashlib.sha256()
    size = 0
    pending = None
    try:
        while chunk := source.read(CHUNK if limit is None else min(CHUNK, limit + 1 - size)):
            size += len(chunk)
            if limit is not None and size > limit:
                raise TooLarge(f"more than the {limit} bytes the manifest records")
            if pending is not None:
                pending.result()
            pending = _hasher_pool.submit(digest.update, chunk)
            target.write(chunk)
            if progress:
                progress(len(chunk))
    finally:
        if pending is not None:
            pending.result()
    return size, digest.hexdigest()
