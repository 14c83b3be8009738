"""The few store operations the checkpoint code needs, over any fsspec filesystem.

Every remote call goes through :class:`RetryPolicy`. Small documents are written in one
operation: on object stores a single PUT is atomic (never a partial object), on local
filesystems we write a temp file, fsync it and rename it into place.
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import logging
import os
import shutil
import stat
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from wrapper.checkpoint.errors import CheckpointError, SnapshotUnstableError
from wrapper.checkpoint.hashing import (
    SMALL_FILE,
    copy_and_digest,
    copy_small,
    start_writeback,
    stat_key,
)
from wrapper.checkpoint.marker import _fsync_dir
from wrapper.checkpoint.retry import RetryPolicy
from wrapper.redact import redact, register_url_secrets
from wrapper.checkpoint.snapshot import TEMP_TAG


def open_url(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    options = dict(storage_options or {})
    register_url_secrets(url, options)  # any echo of them, even by a library, is masked
    s3 = url.startswith(("s3://", "s3a://"))
    if s3:
        # Listings must reflect deletes and writes of this very process.
        options.setdefault("use_listings_cache", False)
        # Every request bounded: botocore's defaults are 60 s to connect and 60 s per
        # read, retried by botocore AND by s3fs (5 x 5 tries) under our own retries: a
        # server that stops answering held a publish for many minutes. Here each try is
        # one request with these timeouts; RetryPolicy alone retries, under its deadline.
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", _seconds("RESCHED_S3_CONNECT_TIMEOUT_S", 10.0))
        config.setdefault("read_timeout", _seconds("RESCHED_S3_READ_TIMEOUT_S", 60.0))
        config.setdefault("retries", {"total_max_attempts": 1})
        options["config_kwargs"] = config
    _quiet_orphaned_tasks()
    import fsspec  # type: ignore[import-untyped]  # ~0.2 s: only for non-local stores

    try:
        fs, root = fsspec.core.url_to_fs(url, **options)
    except (ImportError, ValueError) as error:
        raise CheckpointError(
            f"cannot open store {url}: {error}",
            fix="use a file path, file://, s3:// (pip install 'resched[s3]') or another "
            "fsspec URL whose package is installed",
        ) from None
    if s3 and hasattr(fs, "retries"):
        fs.retries = 1  # s3fs's own retry loop: RetryPolicy is the one that retries
    return fs, root


class _OrphanedTaskFilter(logging.Filter):
    """A request abandoned on a dead connection leaves an aiohttp task whose error nobody
    reads; asyncio then logs "Task exception was never retrieved" with a traceback on
    stderr, around our one error line. The error itself reached us (and is reported)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        return not text.startswith(("Task exception was never retrieved",
                                    "Future exception was never retrieved"))


def _quiet_orphaned_tasks() -> None:
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _OrphanedTaskFilter) for f in logger.filters):
        logger.addFilter(_OrphanedTaskFilter())


def _seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, "") or default)
    except ValueError:
        return default
    return value if value > 0 else default


def endpoint_of(url: str, storage_options: dict[str, Any] | None) -> str | None:
    """The server a remote store talks to (for error lines), credentials masked."""
    client = (storage_options or {}).get("client_kwargs") or {}
    endpoint = client.get("endpoint_url") or (storage_options or {}).get("endpoint_url") \
        or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint is None and url.startswith(("s3://", "s3a://")):
        endpoint = "AWS S3 (default endpoint)"
    return redact(str(endpoint)) if endpoint else None


# The largest small document (pointer, manifest, identity) a store may hold: a FIFO or
# an endless file named "latest" must not hang or fill memory.
_MAX_DOCUMENT = 1 << 30


def local_root(url: str) -> str | None:
    """The directory of a plain path or ``file:///abs`` URL; None for anything fsspec
    must resolve (other protocols, ``file://host/...``, chained URLs)."""
    if "::" in url:
        return None
    if url.startswith("file://"):
        rest = url[len("file://"):]
        return rest if rest.startswith("/") else None
    if "://" in url:
        return None
    return os.path.abspath(os.path.expanduser(url))


class StoreFS:
    """A store root (``url``) and relative keys below it ("latest", "objects/ab/abcd...").

    Local stores are served by plain ``os`` calls (no fsspec import on the start-up path
    of ``resched checkpoint publish``; no link followed when reading our documents);
    every other URL by fsspec."""

    def __init__(self, url: str, *, retry: RetryPolicy,
                 storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.retry = retry
        local = local_root(url)
        self._fs: Any = None
        if local is not None:
            register_url_secrets(url, storage_options)
            root = local
        elif url.startswith("file://"):
            # fsspec would take "file://KEY:SECRET@/data" as a RELATIVE path and create
            # "KEY:SECRET@/data" in the working directory.
            register_url_secrets(url, storage_options)
            raise CheckpointError(f"{redact(url)} is not a local path URL",
                                  fix="write file:///absolute/path (three slashes) or a "
                                  "plain path")
        else:
            self._fs, root = open_url(url, storage_options)
        self.endpoint = endpoint_of(url, storage_options) if local is None else None
        self._made: set[Path] = set()  # folders this process created or found (ingest)
        # objects/<xx> folders open_blob opened without following a link, kept open
        self._dir_fds: dict[str, int] = {}
        self._dir_lock = threading.Lock()
        self.root = root.rstrip("/") if root not in ("/", "") else root
        self.is_local = local is not None or type(self._fs).__name__ == "LocalFileSystem"

    def once(self) -> StoreFS:
        """This store with a single try per operation: best-effort cleanup after a
        failure must not spend the retry budget again per object on a store that is gone."""
        single = copy.copy(self)
        single.retry = dataclasses.replace(self.retry, attempts=1)
        return single

    @property
    def fs(self) -> Any:
        if self._fs is None:
            from fsspec.implementations.local import LocalFileSystem  # type: ignore[import-untyped]

            self._fs = LocalFileSystem()
        return self._fs

    def key(self, relkey: str) -> str:
        return f"{self.root}/{relkey}" if self.root else relkey

    def local_path(self, relkey: str) -> Path:
        return Path(self.key(relkey))

    def read_bytes(self, relkey: str) -> bytes | None:
        def read() -> bytes | None:
            try:
                if self.is_local:
                    return _read_local_document(self.local_path(relkey))
                return self.fs.cat_file(self.key(relkey))
            except FileNotFoundError:
                return None
        return self.retry.call(read, what=f"read {self.key(relkey)}")

    def write_bytes(self, relkey: str, data: bytes) -> None:
        if self.is_local:
            self.retry.call(lambda: _write_local_atomic(self.local_path(relkey), data),
                            what=f"write {self.key(relkey)}")
        else:
            self.retry.call(lambda: self.fs.pipe_file(self.key(relkey), data),
                            what=f"write {self.key(relkey)}")

    def list_files(self, relprefix: str) -> dict[str, int]:
        """relative key -> size of every object under ``relprefix`` (empty when none).

        On a local disk only regular files reached without following a link count: a
        symlink, FIFO or device inside the store is not a blob (never verified, never
        read) and is not ours to delete."""
        if self.is_local:
            return self.retry.call(lambda: _walk_regular(self.local_path(""), relprefix),
                                   what=f"list {self.key(relprefix)}")

        def find() -> dict[str, int]:
            full = self.key(relprefix)
            self.fs.invalidate_cache(full)
            try:
                found = self.fs.find(full, detail=True)
            except FileNotFoundError:
                return {}
            prefix = self.key("")
            return {
                name.removeprefix(prefix): int(info.get("size") or 0)
                for name, info in found.items()
                if info.get("type", "file") == "file"
            }
        return self.retry.call(find, what=f"list {self.key(relprefix)}")

    def exists(self, relkey: str) -> bool:
        if self.is_local:
            return os.path.lexists(self.local_path(relkey))

        def check() -> bool:
            self.fs.invalidate_cache(self.key(relkey))
            return bool(self.fs.exists(self.key(relkey)))
        return self.retry.call(check, what=f"stat {self.key(relkey)}")

    def delete(self, relkey: str) -> None:
        def remove() -> None:
            try:
                if self.is_local:  # the name itself: a link is removed, never followed
                    os.unlink(self.local_path(relkey))
                else:
                    self.fs.rm_file(self.key(relkey))
            except FileNotFoundError:
                pass
        self.retry.call(remove, what=f"delete {self.key(relkey)}")

    def put_file(self, source: Path, relkey: str) -> None:
        """Upload ``source`` to ``relkey`` (one PUT / multipart on object stores)."""
        def put() -> None:
            self.fs.put_file(str(source), self.key(relkey))
        self.retry.call(put, what=f"upload {source} to {self.key(relkey)}")

    def ingest_local(self, source: Path, relkey_for: Callable[[str], str],
                     keep_existing: Callable[[str, int], bool],
                     progress: Callable[[int], None] | None = None
                     ) -> tuple[int, str, Path | None]:
        """Local stores: copy ``source`` into the store and rename it to
        ``relkey_for(sha256)`` unless ``keep_existing(sha256, size)``. Returns (size,
        sha256, the blob written or None). The caller fsyncs written blobs (all at once,
        before the manifest is written: one writeback wait instead of one per file).

        The kernel copies while a helper thread hashes the same bytes from the page
        cache (hashing.copy_and_digest). The source is opened without following a link
        and must stay a regular file of the same size and times (compared before and
        after): a file that changed meanwhile is refused, never stored under a hash of
        other bytes."""
        tmp_dir = self.local_path("objects")
        if tmp_dir not in self._made:
            tmp_dir.mkdir(parents=True, exist_ok=True)
            self._made.add(tmp_dir)
        tmp = tmp_dir / f"{TEMP_TAG}{uuid.uuid4().hex}"
        renamed = False
        src_fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            before = os.fstat(src_fd)
            if not stat.S_ISREG(before.st_mode):
                raise SnapshotUnstableError(f"{source} is no longer a regular file")
            _advise_sequential(src_fd)
            dst_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                if before.st_size <= SMALL_FILE:
                    size, sha = copy_small(src_fd, dst_fd, before.st_size, progress)
                else:
                    size, sha = copy_and_digest(src_fd, dst_fd, before.st_size, progress)
            finally:
                os.close(dst_fd)
            if stat_key(os.stat(source)) != stat_key(before) or size != before.st_size:
                raise SnapshotUnstableError(f"{source} changed while it was published")
            if keep_existing(sha, size):
                return size, sha, None
            target = self.local_path(relkey_for(sha))
            if target.parent not in self._made:
                target.parent.mkdir(parents=True, exist_ok=True)
                self._made.add(target.parent)
            os.replace(tmp, target)
            renamed = True
            return size, sha, target
        finally:
            os.close(src_fd)
            if not renamed:
                tmp.unlink(missing_ok=True)

    def write_blob(self, relkey: str, data: bytes) -> Path | None:
        """Store ``data`` (a pack) under ``relkey``: one PUT on object stores; locally a
        temp file renamed into place, returned so that the caller fsyncs it with the
        other new blobs before the manifest is written (None on object stores)."""
        if not self.is_local:
            self.retry.call(lambda: self.fs.pipe_file(self.key(relkey), data),
                            what=f"write {self.key(relkey)}")
            return None

        def write() -> Path:
            target = self.local_path(relkey)
            if target.parent not in self._made:
                target.parent.mkdir(parents=True, exist_ok=True)
                self._made.add(target.parent)
            tmp = target.parent.parent / f"{TEMP_TAG}{uuid.uuid4().hex}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    start_writeback(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            return target
        return self.retry.call(write, what=f"write {self.key(relkey)}")

    def read_range(self, relkey: str, start: int, end: int, size: int) -> bytes:
        """Bytes ``[start, end)`` of the blob ``relkey`` of ``size`` bytes (a pack): one
        ranged GET on object stores; locally the same safe open as :meth:`open_blob`
        (no link, a regular file of exactly ``size`` bytes, unchanged while read)."""
        if not self.is_local:
            return self.fs.cat_file(self.key(relkey), start=start, end=end)
        fd = self.open_blob(relkey, size)
        try:
            before = os.fstat(fd)
            data = os.pread(fd, end - start, start)
            while len(data) < end - start:
                more = os.pread(fd, end - start - len(data), start + len(data))
                if not more:
                    break
                data += more
            if stat_key(os.fstat(fd)) != stat_key(before):
                raise UnsafeBlobError(f"{self.key(relkey)} changed while it was read")
            return data
        finally:
            os.close(fd)

    def open_blob(self, relkey: str, size: int) -> int:
        """A read-only fd of a local store's blob, opened safely: no link followed below
        the store root (each folder opened O_NOFOLLOW relative to its parent), only a
        regular file (a FIFO or device is never opened: lstat first, then O_NONBLOCK and
        fstat on the same inode), and of the size the manifest records."""
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
        parts = relkey.split("/")
        folder = "/".join(parts[:-1])
        with self._dir_lock:
            cached = self._dir_fds.get(folder)
        if cached is not None:  # a folder opened (safely) before: one open per blob
            return self._open_in(cached, parts[-1], relkey, size, flags)
        dir_fd = os.open(self.local_path(""), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:
                try:
                    next_fd = os.open(part, flags | os.O_DIRECTORY, dir_fd=dir_fd)
                except FileNotFoundError:
                    raise FileNotFoundError(f"blob {self.key(relkey)} is missing") from None
                except OSError as error:
                    if error.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise UnsafeBlobError(f"{self.key(relkey)}: {part} is a symlink or "
                                              "not a directory") from None
                    raise
                os.close(dir_fd)
                dir_fd = next_fd
            with self._dir_lock:
                if folder not in self._dir_fds:
                    self._dir_fds[folder] = os.dup(dir_fd)
            return self._open_in(dir_fd, parts[-1], relkey, size, flags)
        finally:
            os.close(dir_fd)

    def close_dirs(self) -> None:
        """Close the folders open_blob keeps open (end of a restore or verify)."""
        with self._dir_lock:
            fds, self._dir_fds = list(self._dir_fds.values()), {}
        for fd in fds:
            os.close(fd)

    def _open_in(self, dir_fd: int, name: str, relkey: str, size: int, flags: int) -> int:
        try:
            seen = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise FileNotFoundError(f"blob {self.key(relkey)} is missing") from None
        if not stat.S_ISREG(seen.st_mode):
            raise UnsafeBlobError(f"{self.key(relkey)} is not a regular file "
                                  f"({_kind(seen.st_mode)})")
        fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            os.close(fd)
            raise UnsafeBlobError(f"{self.key(relkey)} was replaced while it was opened")
        if st.st_size != size:
            os.close(fd)
            raise UnsafeBlobError(f"{self.key(relkey)} has {st.st_size} bytes, the manifest "
                                  f"says {size}")
        _advise_sequential(fd)
        return fd

    def ingest_plain_local(self, source: Path, relkey: str) -> None:
        """Local stores: copy ``source`` to ``relkey`` (tmp + rename: never half a file)."""
        self.retry.call(lambda: _copy_local_atomic(source, self.local_path(relkey)),
                        what=f"copy {source} to {self.key(relkey)}")

    def open_read(self, relkey: str) -> Any:
        return self.fs.open(self.key(relkey), "rb", block_size=8 << 20)


class UnsafeBlobError(ValueError):
    """A store entry that is not a plain regular file of the expected size: damage (a
    ValueError, so it is never retried)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _advise_sequential(fd: int) -> None:
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except (AttributeError, OSError):
        pass


def _read_local_document(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_DOCUMENT:
            raise UnsafeBlobError(f"{path} is not a regular file of a sane size "
                                  f"({_kind(st.st_mode)}, {st.st_size} bytes)")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(_MAX_DOCUMENT + 1)
    finally:
        os.close(fd)


def _walk_regular(root: Path, relprefix: str) -> dict[str, int]:
    found: dict[str, int] = {}
    start = relprefix.rstrip("/")
    try:
        top = os.lstat(root / start) if start else os.lstat(root)
    except FileNotFoundError:
        return found
    if not stat.S_ISDIR(top.st_mode):  # a link or a file where a folder belongs
        return found
    pending = [start]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(root / folder if folder else root))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            relkey = f"{folder}/{entry.name}" if folder else entry.name
            if entry.is_dir(follow_symlinks=False):
                pending.append(relkey)
            elif entry.is_file(follow_symlinks=False):
                found[relkey] = entry.stat(follow_symlinks=False).st_size
    return found


def _write_local_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}{TEMP_TAG}{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


# Above this many files one syncfs of their filesystem replaces a fsync per file and per
# folder (100k small files: 100k fsyncs were most of a publish's time).
SYNCFS_FROM = 256


def fsync_files(paths: Sequence[str | os.PathLike[str]],
                folders: Iterable[str | os.PathLike[str]] = (), *,
                parents_listed: bool = False) -> None:
    """Make written files, their directory entries and ``folders`` durable.
    ``parents_listed``: ``folders`` already holds the folder of every path (a restore's
    staged tree), so no dirname is taken per file."""
    every = {os.fspath(folder) for folder in folders}
    if not parents_listed:
        every |= {os.path.dirname(os.fspath(path)) for path in paths}
    if len(paths) >= SYNCFS_FROM and _syncfs_all(every):
        return
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for folder in every:
        _fsync_dir(Path(folder))


def _libc_syncfs() -> Callable[[int], int] | None:
    """libc's syncfs(2) (Linux), or None where it is missing."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # only where it is used: start-up of the CLI stays small

        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


class EarlyWriteback:
    """While a many-file restore stages, one syncfs(2) of the staging filesystem every
    ``interval`` seconds in a background thread, so the disk writes (and the journal
    commits the creates) while the next files are still being made. Without it the one
    syncfs before the swap found all 100k files dirty at once and waited 1.2-1.9 s with
    the CPU idle. Durability is unchanged: fsync_files still syncs everything before the
    swap and reports any error; these calls only start work early, and their errors are
    left to it. Linux only; elsewhere (or for few files) it does nothing."""

    def __init__(self, folder: str | os.PathLike[str], *, files: int, interval: float = 0.2,
                 syncfs: Callable[[int], int] | None = None) -> None:
        self._folder = os.fspath(folder)
        self._interval = interval
        self._wanted = files >= SYNCFS_FROM
        self._syncfs = syncfs  # libc's syncfs unless given (tests count the calls)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd = -1

    def __enter__(self) -> EarlyWriteback:
        if not self._wanted:
            return self
        syncfs = self._syncfs or _libc_syncfs()
        if syncfs is None:
            return self
        try:
            self._fd = os.open(self._folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return self

        def loop() -> None:
            while not self._stop.wait(self._interval):
                syncfs(self._fd)

        self._thread = threading.Thread(target=loop, name="resched-writeback", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._fd >= 0:
            os.close(self._fd)


def _syncfs_all(folders: Iterable[str]) -> bool:
    """syncfs(2) once per filesystem the ``folders`` (every folder a written file lies
    in) live on (Linux); False where it is not available, and the caller fsyncs file by
    file."""
    syncfs = _libc_syncfs()
    if syncfs is None:
        return False
    import ctypes  # loaded by _libc_syncfs: for the errno of a failed call

    devices: dict[int, str] = {}
    for folder in folders:  # a stat per folder
        devices.setdefault(os.lstat(folder).st_dev, folder)
    for folder in devices.values():
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if syncfs(fd) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code), folder)
        finally:
            os.close(fd)
    return True


def _copy_local_atomic(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}{TEMP_TAG}{uuid.uuid4().hex}")
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
