"""The few store operations the checkpoint code needs, over any fsspec filesystem.

Every remote call goes through :class:`RetryPolicy`. Small documents are written in one
operation: on object stores a single PUT is atomic (never a partial object), on local
filesystems we write a temp file, fsync it and rename it into place.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec  # type: ignore[import-untyped]
from fsspec.implementations.local import LocalFileSystem  # type: ignore[import-untyped]

from wrapper.checkpoint.errors import CheckpointError, SnapshotUnstableError
from wrapper.checkpoint.hashing import copy_and_hash, stat_key
from wrapper.checkpoint.marker import _fsync_dir
from wrapper.checkpoint.retry import RetryPolicy
from wrapper.redact import register_url_secrets
from wrapper.checkpoint.snapshot import TEMP_TAG


def open_url(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    options = dict(storage_options or {})
    register_url_secrets(url, options)  # any echo of them, even by a library, is masked
    if url.startswith(("s3://", "s3a://")):
        # Listings must reflect deletes and writes of this very process.
        options.setdefault("use_listings_cache", False)
    try:
        return fsspec.core.url_to_fs(url, **options)
    except (ImportError, ValueError) as error:
        raise CheckpointError(
            f"cannot open store {url}: {error}",
            fix="use a file path, file://, s3:// (pip install 'resched[s3]') or another "
            "fsspec URL whose package is installed",
        ) from None


class StoreFS:
    """A store root (``url``) and relative keys below it ("latest", "objects/ab/abcd...")."""

    def __init__(self, url: str, *, retry: RetryPolicy,
                 storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.fs, root = open_url(url, storage_options)
        self.root = root.rstrip("/") if root not in ("/", "") else root
        self.is_local = isinstance(self.fs, LocalFileSystem)
        self.retry = retry

    def key(self, relkey: str) -> str:
        return f"{self.root}/{relkey}" if self.root else relkey

    def local_path(self, relkey: str) -> Path:
        return Path(self.key(relkey))

    def read_bytes(self, relkey: str) -> bytes | None:
        def read() -> bytes | None:
            try:
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
        """relative key -> size of every object under ``relprefix`` (empty when none)."""
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
        def check() -> bool:
            self.fs.invalidate_cache(self.key(relkey))
            return bool(self.fs.exists(self.key(relkey)))
        return self.retry.call(check, what=f"stat {self.key(relkey)}")

    def delete(self, relkey: str) -> None:
        def remove() -> None:
            try:
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

        The kernel copies (sendfile) while a helper thread hashes the source (from the
        page cache), so a publish costs about one copy. The source's stat is compared
        before and after: a file that changed meanwhile is refused, never stored under
        a hash of other bytes."""
        tmp_dir = self.local_path("objects")
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f"{TEMP_TAG}{uuid.uuid4().hex}"
        try:
            before = os.stat(source)
            size, sha = copy_and_hash(source, tmp, progress, sync=False)
            if stat_key(os.stat(source)) != stat_key(before) or size != before.st_size:
                raise SnapshotUnstableError(f"{source} changed while it was published")
            if keep_existing(sha, size):
                return size, sha, None
            target = self.local_path(relkey_for(sha))
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
            return size, sha, target
        finally:
            tmp.unlink(missing_ok=True)

    def ingest_plain_local(self, source: Path, relkey: str) -> None:
        """Local stores: copy ``source`` to ``relkey`` (tmp + rename: never half a file)."""
        self.retry.call(lambda: _copy_local_atomic(source, self.local_path(relkey)),
                        what=f"copy {source} to {self.key(relkey)}")

    def open_read(self, relkey: str) -> Any:
        return self.fs.open(self.key(relkey), "rb", block_size=8 << 20)


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


def fsync_files(paths: list[Path]) -> None:
    """Make written files and their directory entries durable."""
    for path in paths:
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    for folder in {path.parent for path in paths}:
        _fsync_dir(folder)


def _copy_local_atomic(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}{TEMP_TAG}{uuid.uuid4().hex}")
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
