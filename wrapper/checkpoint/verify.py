"""Verify a store: every committed checkpoint's manifest, blobs and packed files.

Each distinct blob is read once and hashed; each pack is checked for presence and size,
then read once and every file in it hashed against its own entry. Local blobs are
opened with the same safe open as restore (a link is never "verified").
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from wrapper.checkpoint.errors import CheckpointError
from wrapper.checkpoint.hashing import CHUNK
from wrapper.checkpoint.layout import OBJECTS, blob_key, blob_sha, read_manifest, read_pointer
from wrapper.checkpoint.manifest import CheckpointRef, FileEntry, Pack, Pointer
from wrapper.checkpoint.restore import Progress
from wrapper.checkpoint.results import CheckpointCheck, VerifyResult
from wrapper.checkpoint.retry import StoreOperationError
from wrapper.checkpoint.storefs import StoreFS
from wrapper.redact import redact


def verify_store(store: StoreFS, *, progress: Progress | None = None) -> VerifyResult:
    """Check every committed checkpoint: manifest intact, every blob present and hashing
    to its name (each distinct blob is read once); every pack present with its size, and
    each file in it hashing to the sha256 its entry records."""
    pointer = read_pointer(store) or Pointer(())
    present = {sha: size for key, size in store.list_files(OBJECTS).items()
               if (sha := blob_sha(key))}
    verdicts = _Verdicts(store, present, progress)
    checks = [_check(store, ref, verdicts) for ref in pointer.checkpoints]
    return VerifyResult(redact(store.url), tuple(checks),
                        orphan_blobs=len(set(present) - verdicts.referenced))


class _Verdicts:
    """What is wrong with each blob and each packed file (None: nothing), each checked once."""

    def __init__(self, store: StoreFS, present: dict[str, int], progress: Progress | None
                 ) -> None:
        self.store, self.present, self.progress = store, present, progress
        self.blobs: dict[str, str | None] = {}
        self.slices: dict[tuple[str, int, int, str], str | None] = {}

    @property
    def referenced(self) -> set[str]:
        return set(self.blobs) | {pack for pack, _, _, _ in self.slices}

    def single(self, entry: FileEntry) -> str | None:
        if entry.sha256 not in self.blobs:
            self.blobs[entry.sha256] = _blob_problem(self.store, entry, self.present,
                                                     self.progress)
        return self.blobs[entry.sha256]

    def packed(self, pack: Pack, entries: list[FileEntry]) -> list[str | None]:
        keys = [(pack.sha256, e.offset, e.size, e.sha256) for e in entries]
        if any(key not in self.slices for key in keys):
            problem = self._pack_problem(pack)
            data = self._read(pack) if problem is None else b""
            if problem is None and isinstance(data, str):
                problem = data
            for key, entry in zip(keys, entries):
                if problem is not None:
                    self.slices[key] = problem
                    continue
                chunk = data[entry.offset:entry.offset + entry.size]
                actual = hashlib.sha256(chunk).hexdigest()
                self.slices[key] = None if actual == entry.sha256 else \
                    f"its bytes in pack {pack.sha256[:12]} hash to {actual[:12]}"
        return [self.slices[key] for key in keys]

    def _pack_problem(self, pack: Pack) -> str | None:
        if pack.sha256 not in self.present:
            return f"pack {pack.sha256[:12]} missing"
        if self.present[pack.sha256] != pack.size:
            return (f"pack {pack.sha256[:12]} has {self.present[pack.sha256]} bytes, "
                    f"manifest says {pack.size}")
        return None

    def _read(self, pack: Pack) -> bytes | str:
        try:
            data = self.store.retry.call(
                lambda: self.store.read_range(blob_key(pack.sha256), 0, pack.size, pack.size),
                what=f"read pack {pack.sha256[:12]}")
        except StoreOperationError as error:
            return str(error)
        if self.progress:
            self.progress(len(data))
        return data


def _check(store: StoreFS, ref: CheckpointRef, verdicts: _Verdicts) -> CheckpointCheck:
    try:
        manifest = read_manifest(store, ref)
    except CheckpointError as error:
        return CheckpointCheck(ref.checkpoint_id, ref.step, False, (str(error),))
    problems = []
    for entry in manifest.files:
        if entry.pack is None and (problem := verdicts.single(entry)):
            problems.append(f"{entry.path}: {problem}")
    by_pack: dict[str, list[FileEntry]] = {}
    for entry in manifest.files:
        if entry.pack is not None:
            by_pack.setdefault(entry.pack, []).append(entry)
    for pack in manifest.packs:  # each pack read once, whole
        part = by_pack.get(pack.sha256, [])
        for entry, problem in zip(part, verdicts.packed(pack, part)):
            if problem:
                problems.append(f"{entry.path}: {problem}")
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
