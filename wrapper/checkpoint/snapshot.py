"""A consistent view of a local checkpoint directory, and the rule for publishing it.

Symlinks and special files in the source are refused (never followed): a checkpoint
is regular files only. Our own temp files (``*.resched-tmp-*``) are skipped.

Publish rule (documented in docs/checkpoint.md): a snapshot is publishable when
- the directory has the completion marker (``resched-complete.json``) and its files
  (outside ``.resched/``, the wrapper's own state) are exactly those the marker listed,
  with the same size, mtime_ns and inode; or, for a marker without a file list, no file
  is newer than the marker; or, with no marker at all, no file changed in the last
  ``settle_s`` seconds; and
- the file stats taken before hashing are unchanged after the upload (re-checked).
Otherwise the syncer skips the round and tries again sooner.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from wrapper.checkpoint.errors import CheckpointError, SnapshotUnstableError, UnsafePathError
from wrapper.checkpoint.marker import MARKER_NAME, STATE_DIR, TEMP_TAG, marker_data


@dataclass(frozen=True)
class LocalFile:
    relpath: str
    path: Path
    stat: os.stat_result

    @property
    def signature(self) -> tuple[str, int, int, int, int]:
        st = self.stat
        return (self.relpath, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Snapshot:
    directory: Path
    files: tuple[LocalFile, ...]

    @property
    def signature(self) -> frozenset[tuple[str, int, int, int, int]]:
        return frozenset(f.signature for f in self.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.stat.st_size for f in self.files)


def take_snapshot(directory: Path) -> Snapshot:
    """Stat every regular file under ``directory``; refuse symlinks and special files."""
    if not directory.is_dir():
        raise CheckpointError(
            f"checkpoint directory {directory} does not exist or is not a directory",
            fix="pass the directory the training writes its checkpoints to",
        )
    found: list[LocalFile] = []
    for root, dirs, names in os.walk(directory):
        base = Path(root)
        for name in sorted(dirs) + sorted(names):
            full = base / name
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                raise SnapshotUnstableError(f"{full} vanished while it was scanned") from None
            relpath = full.relative_to(directory).as_posix()
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePathError(
                    f"{full} is a symlink; checkpoints hold regular files only",
                    fix="replace the link by the file it points to, or move it out of the "
                    "checkpoint directory",
                )
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(f"{full} is not a regular file", fix="remove it")
            if TEMP_TAG in name:
                continue
            if "\\" in relpath:
                raise UnsafePathError(
                    f"{full}: a backslash in a file name is not portable to object stores",
                    fix="rename the file",
                )
            found.append(LocalFile(relpath, full, st))
    found.sort(key=lambda f: f.relpath)
    return Snapshot(directory, tuple(found))


def check_publishable(snapshot: Snapshot, *, now_ns: int, settle_s: float) -> None:
    """Raise SnapshotUnstableError when the snapshot may be a half-written checkpoint."""
    marker = next((f for f in snapshot.files if f.relpath == MARKER_NAME), None)
    watched = [
        f for f in snapshot.files
        if f.relpath != MARKER_NAME and not f.relpath.startswith(STATE_DIR + "/")
    ]
    listed = (marker_data(snapshot.directory) or {}).get("files") if marker else None
    if isinstance(listed, dict):
        # Size and mtime_ns, not the inode: a copy that keeps times (`cp -a` of the
        # restored input, as the shipped templates do) holds the same checkpoint.
        actual = {f.relpath: [f.stat.st_size, f.stat.st_mtime_ns] for f in watched}
        differ = sorted(set(actual) ^ set(listed) | {
            p for p in set(actual) & set(listed) if actual[p] != list(listed[p])[:2]})
        if differ:
            raise SnapshotUnstableError(
                f"{len(differ)} file(s) differ from the completion marker's list (e.g. "
                f"{differ[0]}): a checkpoint is still being written"
            )
        return
    if marker is not None:
        newer = [f.relpath for f in watched if f.stat.st_mtime_ns > marker.stat.st_mtime_ns]
        if newer:
            raise SnapshotUnstableError(
                f"{len(newer)} file(s) newer than the completion marker (e.g. {newer[0]}): "
                "a checkpoint is still being written"
            )
        return
    recent = [f.relpath for f in watched if now_ns - f.stat.st_mtime_ns < settle_s * 1e9]
    if recent:
        raise SnapshotUnstableError(
            f"no completion marker and {recent[0]} changed less than {settle_s:g} s ago"
        )


def check_unchanged(before: Snapshot) -> None:
    """Raise SnapshotUnstableError when the directory changed since ``before``."""
    after = take_snapshot(before.directory)
    if after.signature != before.signature:
        changed = sorted({s[0] for s in after.signature ^ before.signature})
        raise SnapshotUnstableError(
            f"{before.directory} changed while it was published ({changed[0]} and "
            f"{len(changed) - 1} more); nothing was committed"
        )
