"""Restore the newest complete checkpoint that verifies; verify and list a store.

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
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from wrapper.checkpoint import crashpoint
from wrapper.checkpoint.errors import CheckpointError, UnsafePathError
from wrapper.checkpoint.hashing import (
    CHUNK,
    SMALL_FILE,
    copy_and_digest,
    copy_hashing,
    copy_small,
    stat_key,
)
from wrapper.checkpoint.layout import (
    OBJECTS,
    blob_key,
    blob_sha,
    manifest_ids,
    read_manifest,
    read_pointer,
)
from wrapper.checkpoint.manifest import CheckpointRef, FileEntry, Manifest, Pointer
from wrapper.checkpoint.marker import _fsync_dir
from wrapper.checkpoint.publish import _workers_for
from wrapper.checkpoint.restore_swap import Staging, safe_destination
from wrapper.checkpoint.results import CheckpointCheck, CheckpointInfo, RestoreResult, VerifyResult
from wrapper.checkpoint.retry import StoreOperationError
from wrapper.checkpoint.layouts import TORN_DIR
from wrapper.redact import redact
from wrapper.checkpoint.storefs import StoreFS, UnsafeBlobError, fsync_files

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
    for entry in files:  # refuse a link or a file in the way before any byte
        safe_destination(target, entry.path)
    staging = Staging(target, {entry.path for entry in files})
    try:
        first: dict[str, int] = {}  # sha256 -> index of the entry that downloads it
        for index, entry in enumerate(files):
            first.setdefault(entry.sha256, index)

        def fetch(index: int) -> None:
            _fetch_one(store, files[index], staging.path(files[index].path), progress)
            crashpoint.reached("restore.after_file")

        workers = (_workers_for(manifest.total_bytes, len(files))
                   if store.is_local else 4)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="resched-get") as pool:
            list(pool.map(fetch, sorted(first.values())))
        for index, entry in enumerate(files):  # same content again: copy, verified
            if first[entry.sha256] != index:
                copy = staging.path(entry.path)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(staging.path(files[first[entry.sha256]].path), copy)
        staged = [staging.path(entry.path) for entry in files]
        fsync_files(staged)  # durable before they replace anything
        for folder in {path.parent for path in staged} | {staging.root}:
            _fsync_dir(folder)
    except BaseException:
        staging.discard()
        raise
    staging.swap()


def _fetch_one(store: StoreFS, entry: FileEntry, tmp: Path, progress: Progress | None) -> None:
    tmp.parent.mkdir(parents=True, exist_ok=True)

    def attempt() -> tuple[int, str]:
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
                finally:
                    os.close(dst_fd)
                if stat_key(after) != stat_key(before):
                    raise UnsafeBlobError(f"blob of {entry.path} changed while it was read")
                return copied, sha
            finally:
                os.close(src_fd)
        with store.open_read(blob_key(entry.sha256)) as src, \
                os.fdopen(os.open(tmp, flags, 0o644), "wb") as dst:
            return copy_hashing(src, dst, progress, limit=entry.size)

    try:
        size, sha = store.retry.call(attempt, what=f"download {entry.path}")
    except StoreOperationError as error:
        raise _Unusable(f"{entry.path}: {error}") from None
    if size != entry.size or sha != entry.sha256:
        raise _Unusable(f"{entry.path} does not match its manifest (size {size} vs "
                        f"{entry.size}, sha256 {sha[:12]} vs {entry.sha256[:12]})")


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


def verify_store(store: StoreFS, *, progress: Progress | None = None) -> VerifyResult:
    """Check every committed checkpoint: manifest intact, every blob present and hashing
    to its name (each distinct blob is read once)."""
    pointer = read_pointer(store) or Pointer(())
    present = {sha: size for key, size in store.list_files(OBJECTS).items()
               if (sha := blob_sha(key))}
    verdicts: dict[str, str | None] = {}
    checks = [_check(store, ref, present, verdicts, progress) for ref in pointer.checkpoints]
    referenced = set(verdicts)
    return VerifyResult(redact(store.url), tuple(checks),
                        orphan_blobs=len(set(present) - referenced))


def _check(store: StoreFS, ref: CheckpointRef, present: dict[str, int],
           verdicts: dict[str, str | None], progress: Progress | None) -> CheckpointCheck:
    try:
        manifest = read_manifest(store, ref)
    except CheckpointError as error:
        return CheckpointCheck(ref.checkpoint_id, ref.step, False, (str(error),))
    problems = []
    for entry in manifest.files:
        if entry.sha256 not in verdicts:
            verdicts[entry.sha256] = _blob_problem(store, entry, present, progress)
        if verdicts[entry.sha256]:
            problems.append(f"{entry.path}: {verdicts[entry.sha256]}")
    return CheckpointCheck(ref.checkpoint_id, ref.step, not problems, tuple(problems))


def _blob_problem(store: StoreFS, entry: FileEntry, present: dict[str, int],
                  progress: Progress | None) -> str | None:
    if entry.sha256 not in present:
        return "blob missing"
    if present[entry.sha256] != entry.size:
        return f"blob has {present[entry.sha256]} bytes, manifest says {entry.size}"

    def digest() -> str:
        hasher = hashlib.sha256()
        if store.is_local:  # the same safe open as restore: a link is never "verified"
            fd = store.open_blob(blob_key(entry.sha256), entry.size)
            handle: Any = os.fdopen(fd, "rb", buffering=0)
        else:
            handle = store.open_read(blob_key(entry.sha256))
        with handle:
            while chunk := handle.read(CHUNK):
                hasher.update(chunk)
                if progress:
                    progress(len(chunk))
        return hasher.hexdigest()

    try:
        actual = store.retry.call(digest, what=f"read blob of {entry.path}")
    except StoreOperationError as error:
        return str(error)
    return None if actual == entry.sha256 else f"blob content hashes to {actual[:12]}"
