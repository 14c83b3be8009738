"""Publishing one snapshot: blobs, then the manifest, then the pointer; then cleanup.

Order is the atomicity argument. A kill before the pointer write leaves the previous
pointer, and every blob it references, untouched: new blobs and a new manifest are only
ever ADDED before the pointer moves, and deletions happen only after it moved, and only
of objects no committed manifest references.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from wrapper.checkpoint import conditional, crashpoint
from wrapper.checkpoint.errors import CheckpointBusyError, CheckpointError, SnapshotUnstableError
from wrapper.checkpoint.hashing import SMALL_FILE, HashCache, hash_file
from wrapper.checkpoint.layout import (
    OBJECTS,
    POINTER_KEY,
    blob_key,
    blob_sha,
    manifest_ids,
    manifest_key,
    new_checkpoint_id,
    producer,
    read_manifest,
    read_pointer,
)
from wrapper.checkpoint.lease import WriterLease, writer_lease
from wrapper.checkpoint.manifest import FileEntry, Manifest, Pack, Pointer, manifest_ref
from wrapper.checkpoint.marker import MARKER_NAME, STATE_DIR
from wrapper.checkpoint.ownership import check_owned, is_own_temp, write_identity
from wrapper.checkpoint.packs import PACK_MIN_FILES, PACKED_MAX, PackBuilder, read_batches
from wrapper.checkpoint.results import PublishResult
from wrapper.checkpoint.retry import StoreOperationError
from wrapper.checkpoint.snapshot import LocalFile, Snapshot, check_unchanged
from wrapper.checkpoint.storefs import StoreFS, fsync_files
from wrapper.redact import redact

Progress = Callable[[int], None]
# The ids new_checkpoint_id makes: only manifests named so are ever collected.
_OWN_ID = re.compile(r"^(?:\d+|s)-\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{8}$")


@dataclass(frozen=True)
class StoreState:
    pointer: Pointer
    manifests: tuple[Manifest, ...]  # of pointer.checkpoints, same order
    gc_safe: bool  # every committed manifest could be read: blob GC knows all references
    pointer_etag: str | None = None  # the version of `latest` this state was read from

    def committed_blobs(self) -> dict[str, int]:
        """sha256 -> size of every blob (single file or pack) a committed manifest names."""
        found: dict[str, int] = {}
        for manifest in self.manifests:
            found.update(manifest.blobs())
        return found

    def committed_slices(self) -> dict[str, FileEntry]:
        """file sha256 -> a committed packed entry holding those bytes."""
        return {e.sha256: e for m in self.manifests for e in m.files if e.pack is not None}


def load_state(store: StoreFS) -> StoreState:
    # the version first, then the content: if `latest` changes in between, the commit's
    # If-Match names the older version and is refused (never the reverse)
    pointer_etag = conditional.etag(store, POINTER_KEY)
    pointer = read_pointer(store) or Pointer(())
    manifests, gc_safe = [], True
    for ref in pointer.checkpoints:
        try:
            manifests.append(read_manifest(store, ref))
        except CheckpointError:
            gc_safe = False  # a damaged manifest: keep every blob, it may be needed
    return StoreState(pointer, tuple(manifests), gc_safe, pointer_etag)


def publish_snapshot(store: StoreFS, snapshot: Snapshot, *, step: int | None, retention: int,
                     cache: HashCache, progress: Progress | None = None,
                     wall_clock: Callable[[], float] = time.time) -> PublishResult:
    started = time.monotonic()
    check_not_empty(snapshot)
    needs_identity = check_owned(store)  # read-only: nothing is written to a foreign place
    with writer_lease(store, wall_clock=wall_clock) as lease:
        crashpoint.reached("publish.after_lease")
        if needs_identity:
            write_identity(store)
            crashpoint.reached("publish.after_identity")
        state = load_state(store)
        uploads = _Uploads(store, state, cache, progress, lease)
        manifest_written: str | None = None
        # Once the PUT / rename of `latest` has been started, `latest` may name this
        # checkpoint (a lost reply, a signal right after the rename): from then on
        # nothing of this publish is ever deleted here; GC of a later publish, which
        # keeps whatever `latest` names, removes it if it was not committed.
        commit_started = False
        try:
            entries = uploads.run(snapshot.files)
            crashpoint.reached("publish.after_blobs")
            check_unchanged(snapshot)
            fsync_files(uploads.written)  # blobs durable before a manifest names them
            crashpoint.reached("publish.after_fsync")
            manifest = Manifest(new_checkpoint_id(step, wall_clock()), step, wall_clock(),
                                producer(), entries, uploads.packs_of(entries))
            latest = state.pointer.latest
            previous = next((m for m in state.manifests[:1]
                             if latest and m.checkpoint_id == latest.checkpoint_id), None)
            changed = previous is None or not previous.same_content(manifest)
            if previous is None or changed:
                raw = manifest.to_bytes()
                manifest_written = manifest_key(manifest.checkpoint_id)
                store.write_bytes(manifest_written, raw)
                crashpoint.reached("publish.after_manifest")
                refs = (manifest_ref(manifest, raw),) + state.pointer.checkpoints[: retention - 1]
                pointer_raw = Pointer(refs).to_bytes()
                commit_started = True
                commit_pointer(store, state, pointer_raw, manifest.checkpoint_id)
                kept = (manifest,) + state.manifests[: retention - 1]
            else:  # the store already holds exactly this: commit nothing
                manifest, refs, kept = previous, state.pointer.checkpoints, state.manifests
                pointer_raw = None
        except BaseException:
            # Nothing was committed: what this publish added is garbage now. Remove it at
            # once (a full disk must not stay full because of our own leftovers) -- but
            # only while `latest` cannot name it (see commit_started).
            if not commit_started:
                uploads.discard(manifest_written)
            raise
        cache.save()
        deleted = collect_garbage(store, {r.checkpoint_id for r in refs}, kept, state.gc_safe,
                                  committed=pointer_raw)
        crashpoint.reached("publish.before_release")
    return PublishResult(
        url=redact(store.url), checkpoint_id=manifest.checkpoint_id, step=manifest.step,
        files=len(manifest.files), size=manifest.total_bytes,
        uploaded_files=uploads.sent_files, uploaded_bytes=uploads.sent_bytes, changed=changed,
        seconds=time.monotonic() - started, deleted_manifests=deleted[0], deleted_blobs=deleted[1],
    )


def commit_pointer(store: StoreFS, state: StoreState, raw: bytes, checkpoint_id: str) -> None:
    """Move `latest`. On an object store with conditional writes only if it is still the
    version this publish started from: a writer that let a checkpoint of another writer
    slip by (a stale read, a lease taken over) is refused instead of dropping it.

    A PUT whose reply was lost may have been applied: its retry then meets 412 (the
    pointer is no longer the version we read: it is OURS), or the call fails for good.
    Either way the outcome is settled by reading `latest` back, never guessed."""
    crashpoint.reached("commit.before_pointer")
    condition = {"IfMatch": state.pointer_etag} if state.pointer_etag else {"IfNoneMatch": "*"}
    try:
        written = conditional.put_if(store, POINTER_KEY, raw, **condition)
        if written is None:
            store.write_bytes(POINTER_KEY, raw)
            written = True
    except StoreOperationError as error:
        if _settle_commit(store, raw, checkpoint_id, error):
            written = True
        else:
            raise
    if not written and not _settle_commit(store, raw, checkpoint_id, None):
        raise CheckpointBusyError(
            f"store {redact(store.url)} changed while this checkpoint was published "
            "(another writer moved `latest`); this checkpoint was not committed (its files "
            "are left for the next publish to collect)",
            fix="a store has one writer: publish again, or give each writer its own URL")
    crashpoint.reached("commit.after_pointer")


def _settle_commit(store: StoreFS, raw: bytes, checkpoint_id: str,
                   error: StoreOperationError | None) -> bool:
    """Whether `latest` holds exactly ``raw`` (this publish's pointer, which names its own
    unique checkpoint id): True committed, False not. When `latest` cannot be read the
    outcome is unknown: raise, deleting nothing."""
    try:
        current = store.read_bytes(POINTER_KEY)
    except StoreOperationError as read_error:
        cause = f"{error}; then " if error else ""
        raise CheckpointError(
            f"the commit of checkpoint {checkpoint_id} to {redact(store.url)} could not be "
            f"confirmed ({cause}reading `latest` back failed: {read_error}); nothing was "
            "deleted",
            fix="check that the store is reachable; `resched checkpoint list URL` shows "
            "whether it was committed, the next publish settles it either way",
        ) from None
    return current == raw


def check_not_empty(snapshot: Snapshot) -> None:
    """An empty checkpoint (no file besides the marker and the wrapper's own state)
    must never become ``latest``: retention would then evict good ones."""
    payload = [f for f in snapshot.files
               if f.relpath != MARKER_NAME and not f.relpath.startswith(STATE_DIR + "/")]
    if not payload:
        raise CheckpointError(
            f"nothing to publish: {snapshot.directory} holds no checkpoint files",
            fix="publish after the training wrote a checkpoint; the store's latest is "
            "unchanged",
        )


class _Uploads:
    """Send the blobs a snapshot needs that the store does not hold yet."""

    def __init__(self, store: StoreFS, state: StoreState, cache: HashCache,
                 progress: Progress | None, lease: WriterLease) -> None:
        self.store, self.cache, self.progress, self.lease = store, cache, progress, lease
        present = {sha: size for key, size in store.list_files(OBJECTS).items()
                   if (sha := blob_sha(key))}
        committed = state.committed_blobs()
        # Only blobs a committed manifest vouches for are reused: an orphan of a torn
        # publish may hold bytes that changed during its upload, or, on a local disk after
        # a crash, bytes that never reached it (blobs are fsynced just before the manifest).
        self.trusted = {sha: size for sha, size in present.items() if committed.get(sha) == size}
        # a small file whose bytes lie in a trusted committed pack is not sent again
        self.slices = {sha: entry for sha, entry in state.committed_slices().items()
                       if entry.pack in self.trusted}
        self.pack_sizes = dict(self.trusted)  # sha256 -> size of every pack entries may name
        self.written: list[Path] = []
        self.sent: dict[str, None] = {}  # claimed blobs, in order (a set was a list: O(n^2))
        self.sent_files = self.sent_bytes = 0
        self._count_lock = threading.Lock()
        self._last_refresh = time.monotonic()

    def run(self, files: tuple[LocalFile, ...]) -> tuple[FileEntry, ...]:
        # Local: two large files at a time (each is a kernel copy plus a hashing thread);
        # object stores: four uploads in flight. On the first failure the files not yet
        # started are cancelled (a full disk fails fast instead of once per file).
        pinned = [f for f in files if f.pinned is not None]  # bytes in hand, not on disk
        read = [f for f in files if f.pinned is None]
        small = [f for f in read if 0 < f.stat.st_size <= PACKED_MAX]
        if len(small) < PACK_MIN_FILES:
            small = []  # a few small files: one blob each (format 1)
        packed = {f.relpath for f in small}
        large = [f for f in read if f.relpath not in packed]
        workers = (_workers_for(sum(f.stat.st_size for f in large), len(large))
                   if self.store.is_local else 4)
        if small:  # reading small files is mostly Python: more threads only fight for the GIL
            workers = max(2, workers if large else 0)
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="resched-put")
        try:
            futures = [pool.submit(self._one, file) for file in large]
            entries = {entry.path: entry for entry in self._pack(small, pool)}
            entries.update((file.relpath, self._send_pinned(file)) for file in pinned)
            entries.update((future.result().path, future.result()) for future in futures)
            return tuple(entries[file.relpath] for file in files)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _pack(self, small: list[LocalFile], pool: ThreadPoolExecutor) -> list[FileEntry]:
        """Small files: read and hashed in batches on ``pool``, new contents concatenated
        into packs here (packs.py); contents the store or this publish already holds are
        referenced where they lie."""
        if not small:
            return []
        builder = PackBuilder(self._send_pack)
        reused: list[FileEntry] = []
        trusted, slices, placed = self.trusted, self.slices, builder.placed
        for file, sha, data, hashed_at in read_batches(pool, small, self._known):
            size = file.stat.st_size
            if data is not None:
                self.cache.put(file.relpath, file.stat, sha, hashed_at)
            if trusted.get(sha) == size:  # the store holds it as a single blob
                reused.append(FileEntry(file.relpath, size, sha))
            elif (where := slices.get(sha) or placed.get(sha)) is not None:
                reused.append(FileEntry(file.relpath, size, sha, where.pack, where.offset))
            elif data is None:  # cannot happen: _known only answers for stored content
                raise SnapshotUnstableError(f"{file.full}: content not found in the store")
            else:
                builder.add(file.relpath, sha, data)
            self._tick(size)
        builder.close_pack()
        return reused + builder.entries

    def _stored(self, sha: str, size: int) -> bool:
        """Whether the store already holds these bytes: a trusted single blob or a slice
        of a trusted pack."""
        return self.trusted.get(sha) == size or sha in self.slices

    def _known(self, file: LocalFile) -> str | None:
        sha = self.cache.get(file.relpath, file.stat)
        if sha is not None and self._stored(sha, file.stat.st_size):
            return sha
        return None

    def _send_pack(self, data: bytes, count: int) -> str:
        """Store one pack (unless the store holds these very bytes) and return its sha256."""
        sha = hashlib.sha256(data).hexdigest()
        self.pack_sizes[sha] = len(data)
        if self._provided(sha, len(data)):
            return sha
        blob = self.store.write_blob(blob_key(sha), data)
        if blob is not None:
            with self._count_lock:
                self.written.append(blob)
        crashpoint.reached("publish.after_pack")
        with self._count_lock:
            self.sent_files += count
            self.sent_bytes += len(data)
        return sha

    def packs_of(self, entries: tuple[FileEntry, ...]) -> tuple[Pack, ...]:
        """The packs ``entries`` name, each once, in order of first use."""
        named = dict.fromkeys(e.pack for e in entries if e.pack is not None)
        return tuple(Pack(sha, self.pack_sizes[sha]) for sha in named if sha is not None)

    def _send_pinned(self, file: LocalFile) -> FileEntry:
        """A file pinned at the scan (a pointer, snapshot._pin): the bytes the layout judged
        then, never the live file, which the training may have rewritten since."""
        data = file.pinned or b""
        sha = hashlib.sha256(data).hexdigest()
        if not self._provided(sha, len(data)):
            blob = self.store.write_blob(blob_key(sha), data)
            with self._count_lock:
                if blob is not None:
                    self.written.append(blob)
                self.sent_files += 1
                self.sent_bytes += len(data)
            crashpoint.reached("publish.after_blob")
        self._tick(len(data))
        return FileEntry(file.relpath, len(data), sha)

    def _one(self, file: LocalFile) -> FileEntry:
        try:
            return self._send(file)
        except FileNotFoundError:
            raise SnapshotUnstableError(f"{file.path} vanished while it was published") from None

    def _send(self, file: LocalFile) -> FileEntry:
        size = file.stat.st_size
        sha = self.cache.get(file.relpath, file.stat)
        if sha is not None and self.trusted.get(sha) == size:
            self._tick(size)
            return FileEntry(file.relpath, size, sha)
        hashed_at = time.time_ns()
        if self.store.is_local:
            size, sha, blob = self.store.ingest_local(file.path, blob_key, self._provided,
                                                      self.progress)
            written = blob is not None
            if blob is not None:
                with self._count_lock:
                    self.written.append(blob)
                crashpoint.reached("publish.after_blob")
        else:
            sha = sha or hash_file(file.path)
            written = not self._provided(sha, size)
            if written:
                self.store.put_file(file.path, blob_key(sha))
                crashpoint.reached("publish.after_blob")
            self._tick(size)
        if size != file.stat.st_size:
            raise SnapshotUnstableError(f"{file.path} changed size while it was published")
        self.cache.put(file.relpath, file.stat, sha, hashed_at)
        if written:
            with self._count_lock:
                self.sent_files += 1
                self.sent_bytes += size
        return FileEntry(file.relpath, size, sha)

    def _provided(self, sha: str, size: int) -> bool:
        """True when the store holds this blob or another worker of this publish sends
        it; otherwise claims it for the caller (two files, one content: one upload)."""
        with self._count_lock:
            if self.trusted.get(sha) == size or sha in self.sent:
                return True
            self.sent[sha] = None
            return False

    def _tick(self, size: int) -> None:
        if self.progress:
            self.progress(size)
        if time.monotonic() - self._last_refresh > 60:
            self._last_refresh = time.monotonic()
            self.lease.refresh()

    def discard(self, manifest_key_written: str | None = None) -> None:
        """Remove what this uncommitted publish wrote: its manifest, and every blob it
        claimed (an untrusted blob is referenced by no committed manifest, so deleting
        it never harms a checkpoint). Best effort: the original error is what counts."""
        keys = [blob_key(sha) for sha in self.sent]
        if manifest_key_written:
            keys.append(manifest_key_written)
        store = self.store.once()
        for key in keys:
            try:
                store.delete(key)
            except StoreOperationError:
                if not store.is_local:
                    return  # the store is gone: the next publish's GC removes the rest
            except Exception:  # noqa: BLE001 - the next publish's GC removes it
                pass


def _workers_for(total_bytes: int, count: int) -> int:
    """Local copies: two large files at a time (each is a kernel copy plus a hashing
    thread); small files are mostly system calls that release the GIL: more at once."""
    if count and total_bytes / count <= SMALL_FILE:
        return min(8, 4 * (os.cpu_count() or 1))
    return 2


def collect_garbage(store: StoreFS, kept_ids: set[str], kept: tuple[Manifest, ...],
                    gc_safe: bool, *, committed: bytes | None = None) -> tuple[int, int]:
    """Delete manifests the pointer does not name, then blobs no kept manifest uses.

    Only while `latest` is still what this publish committed (or read): a writer that
    took the store over meanwhile (an expired lease) may have committed checkpoints this
    process has never seen, and nothing `latest` may name is ever deleted."""
    current = store.read_bytes(POINTER_KEY)
    if committed is not None and current != committed:
        return 0, 0
    if committed is None and current is not None:
        named = {r.checkpoint_id for r in Pointer.from_bytes(current, where=POINTER_KEY).checkpoints}
        if not named <= kept_ids:
            return 0, 0
    deleted_manifests = 0
    for checkpoint_id, key in manifest_ids(store).items():
        if checkpoint_id not in kept_ids and _OWN_ID.match(checkpoint_id):
            store.delete(key)
            deleted_manifests += 1
    crashpoint.reached("gc.after_manifests")
    if store.is_local:  # temp files of a killed local write, ours by name only
        for key in store.list_files(""):
            if is_own_temp(key):
                store.delete(key)
    if not gc_safe:
        return deleted_manifests, 0
    referenced = {sha for m in kept for sha in m.blobs()}  # single files and packs
    deleted_blobs = 0
    for key in store.list_files(OBJECTS):
        sha = blob_sha(key)
        if sha is not None and sha not in referenced:  # only names of our scheme
            store.delete(key)
            deleted_blobs += 1
            crashpoint.reached("gc.after_blob")
            if store.is_local:  # drop the emptied objects/<xx>/ directory
                try:
                    store.local_path(key).parent.rmdir()
                except OSError:
                    pass
    return deleted_manifests, deleted_blobs
