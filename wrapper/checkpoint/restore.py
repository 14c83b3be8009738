"""Restore the newest complete checkpoint that verifies; list a store (verify.py checks it).

Every file of a checkpoint is downloaded into a private staging folder while its sha256
is computed; only when EVERY file matched its manifest is the staged tree swapped into
place (restore_swap.py: one rename, or a journaled roll-forward). A checkpoint that fails
leaves nothing behind, and the next older complete one is tried; the result says which
ones were skipped and why.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from wrapper.checkpoint import crashpoint
from wrapper.checkpoint.errors import CheckpointError, UnsafePathError
from wrapper.checkpoint.hashing import (
    SMALL_FILE,
    copy_and_digest,
    copy_hashing,
    copy_small,
    stat_key,
)
from wrapper.checkpoint.layout import (
    blob_key,
    manifest_ids,
    read_manifest,
    read_pointer,
)
from wrapper.checkpoint.layouts import TORN_DIR
from wrapper.checkpoint.manifest import CheckpointRef, FileEntry, Manifest, Pack, Pointer
from wrapper.checkpoint.packs import pack_ranges
from wrapper.checkpoint.publish import _workers_for
from wrapper.checkpoint.restore_swap import Staging, safe_destination
from wrapper.checkpoint.results import CheckpointInfo, RestoreResult
from wrapper.checkpoint.retry import StoreOperationError
from wrapper.checkpoint.storefs import EarlyWriteback, StoreFS, UnsafeBlobError, fsync_files
from wrapper.redact import redact

Progress = Callable[[int], None]


class _Unusable(Exception):
    """This checkpoint cannot be restored (missing or mismatching file); try an older one."""


# A checkpoint that vanished under a restore (a publish with --retention 1 retired it
# between our read of `latest` and our download) is not damage: read `latest` again.
_POINTER_ROUNDS = 5


def restore_latest(store: StoreFS, target: Path, *, progress: Progress | None = None
                   ) -> RestoreResult | None:
    started = time.monotonic()
    pointer = read_pointer(store)
    if pointer is None or not pointer.checkpoints:
        return None
    target.mkdir(parents=True, exist_ok=True)  # empty until a whole checkpoint swaps in
    failed: list[str] = []
    reasons: list[str] = []
    for _ in range(_POINTER_ROUNDS):
        failed, reasons = [], []
        for ref in pointer.checkpoints:
            try:
                manifest = read_manifest(store, ref)
                _download_verified(store, manifest, target, progress)
            except (_Unusable, CheckpointError) as why:
                if isinstance(why, UnsafePathError):
                    raise
                failed.append(ref.checkpoint_id)
                reasons.append(f"{ref.checkpoint_id} (step {ref.step}): {why}")
                continue
            return RestoreResult(
                url=redact(store.url), local_dir=target, checkpoint_id=manifest.checkpoint_id,
                step=manifest.step, files=len(manifest.files), size=manifest.total_bytes,
                fell_back_from=tuple(failed), reason="; ".join(reasons) or None,
                seconds=time.monotonic() - started,
            )
        again = read_pointer(store)
        if again is None or again == pointer:
            break
        pointer = again  # `latest` moved while we read: the new one is what to restore
    raise CheckpointError(
        f"no complete checkpoint in {store.url} passed verification: {'; '.join(reasons)}",
        fix="run `resched checkpoint verify URL` to see the damage; an older copy of the "
        "store, if any, is the only way back",
    )


def _download_verified(store: StoreFS, manifest: Manifest, target: Path,
                       progress: Progress | None) -> None:
    """Stage every file of ``manifest``, verify it, then swap the whole into ``target``
    (restore_swap: all or nothing per directory)."""
    # Torn saves set aside (.resched-torn/) stay in the store: never restored into the
    # training's directory (issue 19); `resched checkpoint list` counts them.
    files = [e for e in manifest.files if not e.path.startswith(TORN_DIR + "/")]
    if not _is_empty_dir(target):  # refuse a link or a file in the way before any byte
        for entry in files:
            safe_destination(target, entry.path)
    staging = Staging(target, {entry.path for entry in files})
    try:
        root = os.fspath(staging.root)
        # every folder once, parents first (string work on relative paths: no dirname
        # or makedirs per file of 100k)
        relfolders = _with_ancestors({entry.path.rpartition("/")[0] for entry in files})
        folders = [f"{root}/{folder}" for folder in sorted(relfolders)]
        for folder in folders:
            os.makedirs(folder, exist_ok=True)
        single = [e for e in files if e.pack is None]
        first: dict[str, int] = {}  # sha256 -> index of the entry that downloads it
        for index, entry in enumerate(single):
            first.setdefault(entry.sha256, index)

        def fetch(index: int) -> list[Staged]:
            stats = _fetch_one(store, single[index], staging.path(single[index].path), progress)
            crashpoint.reached("restore.after_file")
            return [(single[index].path, stats)]

        def unpack(part: tuple[Pack, list[FileEntry]]) -> list[Staged]:
            return _stage_packed(store, part[0], part[1], root, progress)

        workers = (_workers_for(manifest.total_bytes, len(files))
                   if store.is_local else 4)
        ranges = pack_ranges([e for e in files if e.pack is not None], manifest.packs)
        staged: list[Staged] = []
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="resched-get")
        with EarlyWriteback(root, files=len(files)):
            try:
                done = [pool.submit(unpack, part) for part in ranges]
                done += [pool.submit(fetch, index) for index in sorted(first.values())]
                for future in done:
                    staged += future.result()
            finally:  # a damaged file stops the tasks not yet started; the rest end first
                pool.shutdown(wait=True, cancel_futures=True)
            for index, entry in enumerate(single):  # same content again: copy, verified
                if first[entry.sha256] != index:
                    copy = staging.path(entry.path)
                    shutil.copyfile(staging.path(single[first[entry.sha256]].path), copy)
                    staged.append((entry.path, _stats(os.lstat(copy))))
        # durable before they replace anything (files, then their folders)
        fsync_files([f"{root}/{entry.path}" for entry in files], folders=folders + [root],
                    parents_listed=True)
    except BaseException:
        staging.discard()
        raise
    staging.swap(staged)


# (relative path, [size, mtime_ns, inode]) of one staged file: the marker's file list
# is re-stamped from these (marker.restamp_marker), not from a second walk of the tree
Staged = tuple[str, list[int]]


def _stats(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _with_ancestors(folders: set[str]) -> set[str]:
    """The relative ``folders`` and every folder above them ("" left out)."""
    found: set[str] = set()
    for folder in folders:
        while folder and folder not in found:
            found.add(folder)
            folder = folder.rpartition("/")[0]
    return found


def _is_empty_dir(target: Path) -> bool:
    """True when ``target`` is missing or an empty real directory (nothing in the way)."""
    try:
        if not stat.S_ISDIR(os.lstat(target).st_mode):
            return False
    except FileNotFoundError:
        return True
    with os.scandir(target) as entries:
        return next(entries, None) is None


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _stage_packed(store: StoreFS, pack: Pack, part: list[FileEntry], root: str,
                  progress: Progress | None) -> list[Staged]:
    """Write the files of one byte range of one pack into the staging folder ``root``:
    the range is read once; each file is hashed from memory and written only if its
    sha256 matches the manifest (else this checkpoint is unusable).

    The loop runs once per small file (100k of them): each file is created relative to
    its folder's descriptor (one name to look up, not the whole path) and fstat-ed
    before it is closed (for the marker's list), and nothing else is done per file."""
    start, end = part[0].offset, max(e.offset + e.size for e in part)
    try:
        data = store.retry.call(
            lambda: store.read_range(blob_key(pack.sha256), start, end, pack.size),
            what=f"read pack {pack.sha256[:12]} for {part[0].path}")
    except StoreOperationError as error:
        raise _Unusable(f"{part[0].path}: {error}") from None
    if len(data) != end - start:
        raise _Unusable(f"pack {pack.sha256[:12]} holds fewer bytes than its manifest says "
                        f"({part[0].path})")
    view = memoryview(data)
    sha256, write, fstat, close = hashlib.sha256, os.write, os.fstat, os.close
    staged: list[Staged] = []
    folders: dict[str, int] = {}  # relative folder -> its descriptor, for this range
    try:
        for entry in part:
            at = entry.offset - start
            chunk = view[at:at + entry.size]
            if sha256(chunk).hexdigest() != entry.sha256:
                raise _Unusable(f"{entry.path} does not match its manifest (its bytes in "
                                f"pack {pack.sha256[:12]} hash differently)")
            folder, _, name = entry.path.rpartition("/")
            folder_fd = folders.get(folder)
            if folder_fd is None:
                folder_fd = folders[folder] = os.open(f"{root}/{folder}" if folder else root,
                                                      _FOLDER)
            fd = os.open(name, _CREATE, 0o644, dir_fd=folder_fd)
            try:
                while chunk:
                    chunk = chunk[write(fd, chunk):]
                st = fstat(fd)
            finally:
                close(fd)
            staged.append((entry.path, [st.st_size, st.st_mtime_ns, st.st_ino]))
            if progress:
                progress(entry.size)
            crashpoint.reached("restore.after_file")
    finally:
        for folder_fd in folders.values():
            close(folder_fd)
    return staged


def _fetch_one(store: StoreFS, entry: FileEntry, tmp: Path, progress: Progress | None
               ) -> list[int]:
    """Download one file's own blob to ``tmp``, verified; its [size, mtime_ns, inode]."""
    tmp.parent.mkdir(parents=True, exist_ok=True)

    def attempt() -> tuple[int, str, list[int]]:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        if store.is_local:  # safe open (regular file, no links), one read per byte
            src_fd = store.open_blob(blob_key(entry.sha256), entry.size)
            try:
                dst_fd = os.open(tmp, flags, 0o644)
                try:
                    before = os.fstat(src_fd)
                    copy = copy_small if entry.size <= SMALL_FILE else copy_and_digest
                    copied, sha = copy(src_fd, dst_fd, entry.size, progress)
                    after = os.fstat(src_fd)
                    written = _stats(os.fstat(dst_fd))
                finally:
                    os.close(dst_fd)
                if stat_key(after) != stat_key(before):
                    raise UnsafeBlobError(f"blob of {entry.path} changed while it was read")
                return copied, sha, written
            finally:
                os.close(src_fd)
        with store.open_read(blob_key(entry.sha256)) as src, \
                os.fdopen(os.open(tmp, flags, 0o644), "wb") as dst:
            copied, sha = copy_hashing(src, dst, progress, limit=entry.size)
        return copied, sha, _stats(os.lstat(tmp))  # closed: every byte written

    try:
        size, sha, written = store.retry.call(attempt, what=f"download {entry.path}")
    except StoreOperationError as error:
        raise _Unusable(f"{entry.path}: {error}") from None
    if size != entry.size or sha != entry.sha256:
        raise _Unusable(f"{entry.path} does not match its manifest (size {size} vs "
                        f"{entry.size}, sha256 {sha[:12]} vs {entry.sha256[:12]})")
    return written


_safe_destination = safe_destination  # stage.py's name for it


def list_checkpoints(store: StoreFS) -> list[CheckpointInfo]:
    pointer = read_pointer(store) or Pointer(())
    infos = [
        CheckpointInfo(r.checkpoint_id, r.step, r.time, r.size, r.files, "complete", i == 0,
                       _torn_sets(store, r))
        for i, r in enumerate(pointer.checkpoints)
    ]
    committed = {r.checkpoint_id for r in pointer.checkpoints}
    for checkpoint_id, key in manifest_ids(store).items():
        if checkpoint_id in committed:
            continue
        try:
            manifest = Manifest.from_bytes(store.read_bytes(key) or b"", where=store.key(key))
            infos.append(CheckpointInfo(checkpoint_id, manifest.step, manifest.time,
                                        manifest.total_bytes, len(manifest.files), "torn"))
        except CheckpointError:
            infos.append(CheckpointInfo(checkpoint_id, None, 0.0, 0, 0, "torn"))
    return sorted(infos, key=lambda info: info.time, reverse=True)


def _torn_sets(store: StoreFS, ref: CheckpointRef) -> tuple[str, ...]:
    """The ``.resched-torn/<set>`` folders a committed checkpoint keeps (issue 19)."""
    try:
        manifest = read_manifest(store, ref)
    except CheckpointError:
        return ()
    return tuple(sorted({"/".join(e.path.split("/", 2)[:2]) for e in manifest.files
                         if e.path.startswith(TORN_DIR + "/") and e.path.count("/") >= 2}))
