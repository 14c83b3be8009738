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

:func:`prepare_snapshot` layers this for trainings that write no marker (see
``layouts.py``): resched's marker if present; else a known framework layout (its
unfinished checkpoints left out while the training runs); else "unchanged across the
upload". After the training ended (``final``) nothing can change any more: what is there
is uploaded, unfinished checkpoints under ``.resched-torn/`` so that no framework
resumes from them after a restore, and nothing is left behind.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from wrapper.checkpoint.errors import CheckpointError, SnapshotUnstableError, UnsafePathError
from wrapper.checkpoint.layouts import TORN_DIR, UNKNOWN, Layout, PinnedFile, inspect_layout
from wrapper.checkpoint.links import sibling_target
from wrapper.checkpoint.marker import (
    MARKER_NAME,
    RESTORE_JOURNAL,
    STATE_DIR,
    TEMP_TAG,
    is_restore_leftover,
    marker_data,
    read_marker,
)


@dataclass(frozen=True)
class Selection:
    """Which files of a directory an upload takes, and under which name.

    ``exclude``: relative paths (files or whole folders) left out; ``quarantine``: relative
    paths uploaded under ``<torn_root>/``; ``regex``: OSMO's ``checkpoint: regex:``, matched
    (re.search) against each file's relative path (resched's own ``.resched/`` always goes).
    """

    exclude: tuple[str, ...] = ()
    quarantine: tuple[str, ...] = ()
    regex: str | None = None
    torn_root: str = TORN_DIR

    def covers(self, relpath: str, paths: tuple[str, ...]) -> bool:
        if not paths:
            return False
        # one C-level startswith over all prefixes: this runs once per file (100k files)
        return relpath in paths or relpath.startswith(_prefixes(paths))

    def key(self, relpath: str) -> str:
        if self.quarantine and self.covers(relpath, self.quarantine):
            return f"{self.torn_root}/{relpath}"
        return relpath

    def wants(self, relpath: str) -> bool:
        if self.regex is None or relpath.startswith(STATE_DIR + "/"):
            return True
        return re.search(self.regex, relpath) is not None


@functools.lru_cache(maxsize=64)
def _prefixes(paths: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(p.rstrip("/") + "/" for p in paths)


@dataclass(frozen=True)
class LocalFile:
    relpath: str
    full: str  # the file's path as a string (a Path per file cost seconds at 100k files)
    stat: os.stat_result
    # The bytes of a file the framework rewrites at every save (a pointer, DeepSpeed's
    # recovery scripts) as the layout read and judged them (layouts.PinnedFile): uploaded
    # instead of the live file, which the next save rewrites in place.
    pinned: bytes | None = None

    @property
    def path(self) -> Path:
        return Path(self.full)

    @property
    def signature(self) -> tuple[str, int, int, int, int]:
        st = self.stat
        return (self.relpath, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Snapshot:
    directory: Path
    files: tuple[LocalFile, ...]
    selection: Selection = field(default=Selection())
    # A framework layout judged these files a whole checkpoint: files that appear after
    # the scan are the next save's, not a change to this one (see check_unchanged).
    layout_judged: bool = False

    @property
    def signature(self) -> frozenset[tuple[str, int, int, int, int]]:
        return frozenset(f.signature for f in self.files)

    @property
    def total_bytes(self) -> int:
        return sum(f.stat.st_size for f in self.files)


def take_snapshot(directory: Path, selection: Selection = Selection()) -> Snapshot:
    """Stat every regular file under ``directory``; refuse special files and symlinks,
    except a link to a regular file inside ``directory`` (taken as a copy of that file).
    Excluded paths are not even looked at (a checkpoint being written may hold anything)."""
    if not directory.is_dir():
        raise CheckpointError(
            f"checkpoint directory {directory} does not exist or is not a directory",
            fix="pass the directory the training writes its checkpoints to",
        )
    found: list[LocalFile] = []
    # os.walk skips a folder it cannot list unless told otherwise: a checkpoint with a
    # folder silently left out would be committed as if whole.
    top = os.fspath(directory)
    for root, dirs, names in os.walk(directory, onerror=_walk_error):
        # string paths: 100k small files made pathlib's parsing a large part of a publish
        prefix = "" if root == top else os.path.relpath(root, top).replace(os.sep, "/") + "/"
        at_top = root == top
        for name in sorted(dirs) + sorted(names):
            full_text = os.path.join(root, name)
            relpath = prefix + name
            if selection.exclude and selection.covers(relpath, selection.exclude):
                if name in dirs:
                    dirs.remove(name)
                continue
            if at_top and is_restore_leftover(name):
                if RESTORE_JOURNAL.match(name):
                    raise CheckpointError(
                        f"{directory} holds a restore that was interrupted half-way ({name}): "
                        "its files are part old, part new; nothing was published",
                        fix="run the restore again (resched checkpoint restore URL DIR --force, "
                        "or restart the wrapper): it finishes the interrupted one first")
                if name in dirs:
                    dirs.remove(name)  # a restore's staging, never a checkpoint's file
                continue
            full = full_text
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                raise SnapshotUnstableError(f"{full} vanished while it was scanned") from None
            if stat.S_ISLNK(st.st_mode):
                target = sibling_target(full, top)
                if target is None:
                    raise UnsafePathError(
                        f"{full} is a symlink to something outside the checkpoint directory "
                        "(or to no regular file); checkpoints hold regular files only",
                        fix="replace the link by the file it points to, or move it out of the "
                        "checkpoint directory",
                    )
                if selection.wants(relpath):
                    if not os.access(target[0], os.R_OK):
                        raise unreadable(target[0])
                    found.append(LocalFile(selection.key(relpath), target[0], target[1]))
                continue
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
            if not selection.wants(relpath):
                continue
            if not os.access(full, os.R_OK):
                raise unreadable(full)
            found.append(LocalFile(selection.key(relpath), full, st))
    found.sort(key=lambda f: f.relpath)
    return Snapshot(directory, tuple(found), selection)


def unreadable(path: Path | str) -> CheckpointError:
    return CheckpointError(
        f"cannot read {path} (permission denied); nothing was published",
        fix="make it readable by this user, or move it out of the checkpoint directory")


def _walk_error(error: OSError) -> None:
    if isinstance(error, PermissionError):
        raise unreadable(error.filename) from None
    if isinstance(error, FileNotFoundError):
        raise SnapshotUnstableError(f"{error.filename} vanished while it was scanned") from None
    raise CheckpointError(f"cannot list {error.filename}: {error.strerror}") from None


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
    """Raise SnapshotUnstableError when the directory changed since ``before``.

    For a snapshot a framework layout judged whole, only the files it holds must be
    unchanged (each file read, re-stated): a training that saves more often than a
    publish takes adds the next step's files meanwhile, and counting those as a change
    meant no periodic upload ever committed (a Lightning run saving every 0.1 s: every
    publish refused). What it read is what was there at the scan, which the layout
    judged whole; a file of it rewritten, replaced or removed still refuses. A pinned
    file is not re-stated: its bytes were taken at the scan and are what is published,
    so the framework rewriting it in place at its next save (Megatron's tracker,
    DeepSpeed's ``latest`` and recovery scripts) changes nothing of this checkpoint; the
    folder a pointer's bytes name is among the files re-stated."""
    if before.layout_judged:
        changed = [f.relpath for f in before.files if f.pinned is None and not _same_file(f)]
    else:
        after = take_snapshot(before.directory, before.selection)
        changed = sorted({s[0] for s in after.signature ^ before.signature})
    if changed:
        raise SnapshotUnstableError(
            f"{before.directory} changed while it was published ({changed[0]} and "
            f"{len(changed) - 1} more); nothing was committed"
        )


def _same_file(file: LocalFile) -> bool:
    try:
        now = os.lstat(file.full)
    except OSError:
        return False
    return (now.st_ino, now.st_size, now.st_mtime_ns, now.st_ctime_ns) == file.signature[1:]


@dataclass(frozen=True)
class Prepared:
    """A snapshot ready to upload: the step it holds and whether it is whole.

    ``whole`` is False only after the training ended, when the marker or a known layout
    shows that nothing complete is there (the caller then keeps a complete checkpoint the
    store already holds rather than replace it)."""

    snapshot: Snapshot
    step: int | None
    whole: bool
    layer: str  # "marker", a Layout value, or "unchanged" (no known layout)
    reason: str
    warnings: tuple[str, ...] = ()


def _require_payload(snapshot: Snapshot) -> Snapshot:
    # resched's own state alone is no checkpoint (a pod that has not saved yet): uploading
    # it would make an empty checkpoint the latest. Not a failure: nothing to upload yet.
    if not any(f.relpath != MARKER_NAME and not f.relpath.startswith(STATE_DIR + "/")
               for f in snapshot.files):
        raise SnapshotUnstableError(f"nothing to upload yet: {snapshot.directory} holds no "
                                    "files besides resched's own state")
    return snapshot


def prepare_snapshot(directory: Path, *, final: bool = False, settle_s: float = 0.0,
                     regex: str | None = None, now_ns: int | None = None,
                     layouts: bool = True) -> Prepared:
    """The layered completeness detector (module docstring). While the training runs,
    raises SnapshotUnstableError when no complete state can be uploaded now.
    ``layouts=False``: an explicit publish of exactly what is there (no framework layer)."""
    directory = Path(directory)
    now = time.time_ns() if now_ns is None else now_ns
    # The uploads beside a training skip a pod with nothing saved yet; an explicit publish
    # lets the store say "nothing to publish" itself.
    payload = _require_payload if layouts else (lambda snapshot: snapshot)
    if regex is not None:
        try:
            re.compile(regex)
        except re.error as error:
            raise CheckpointError(f"checkpoint regex {regex!r} is not a valid regular "
                                  f"expression: {error}", fix="fix the checkpoint: regex:") from None
    # Torn saves set aside locally (setaside.py) go up once, with the upload after the
    # training ended, never again with every periodic checkpoint (issue 19).
    hidden = () if final else (TORN_DIR,)
    if os.path.lexists(directory / MARKER_NAME):
        snapshot = payload(take_snapshot(directory, Selection(exclude=hidden, regex=regex)))
        try:
            check_publishable(snapshot, now_ns=now, settle_s=settle_s)
        except SnapshotUnstableError as why:
            if not final:
                raise
            return Prepared(snapshot, None, False, "marker", str(why))
        return Prepared(snapshot, read_marker(directory), True, "marker", "completion marker")
    first = inspect_layout(directory) if layouts else UNKNOWN
    if first.complete is None:
        snapshot = payload(take_snapshot(directory, Selection(exclude=hidden, regex=regex)))
        if not final and settle_s > 0:
            check_publishable(snapshot, now_ns=now, settle_s=settle_s)
        layer = "unchanged" if first.layout is Layout.UNKNOWN else first.layout.value
        return Prepared(snapshot, None, True, layer, first.reason, first.warnings)
    selection = Selection(exclude=hidden if final else first.in_progress + hidden,
                          quarantine=first.in_progress if final else (), regex=regex,
                          torn_root=f"{TORN_DIR}/{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now / 1e9))}")
    snapshot = take_snapshot(directory, selection)
    again = inspect_layout(directory)
    if (again.complete, again.step, again.in_progress, again.pinned) != (
            first.complete, first.step, first.in_progress, first.pinned):
        raise SnapshotUnstableError(
            f"{first.layout.value} checkpoint changed while it was scanned ({first.reason} -> "
            f"{again.reason})")
    if not first.complete:
        if not final:
            raise SnapshotUnstableError(f"{first.layout.value} layout: {first.reason}")
        return Prepared(payload(snapshot), None, False, first.layout.value,
                        first.reason, first.warnings)
    snapshot = _pin(snapshot, first.pinned, regex)
    return Prepared(payload(replace(snapshot, layout_judged=True)), first.step, True,
                    first.layout.value, first.reason, first.warnings)


def _pin(snapshot: Snapshot, pinned: tuple[PinnedFile, ...], regex: str | None) -> Snapshot:
    """The snapshot with each file the framework rewrites at every save carrying the bytes
    the layout judged (read before the scan and again, identical, after it: the folder a
    pointer names was whole on both sides of the scan and its files are in the snapshot,
    re-stated after the upload)."""
    if not pinned:
        return snapshot
    pins = {pin.path: pin.raw for pin in pinned}
    held = {f.relpath for f in snapshot.files}
    for pin in pinned:
        # A pointer whose folder the upload does not hold would make the framework fail
        # after a restore; a regex: of the user's decides what goes up, not this check.
        if (pin.names is not None and regex is None and pin.path in held
                and not any(f.relpath.startswith(pin.names + "/") for f in snapshot.files)):
            raise SnapshotUnstableError(
                f"{pin.path} names {pin.names}/, which the scan did not find")
    files = tuple(replace(f, pinned=pins[f.relpath]) if f.relpath in pins else f
                  for f in snapshot.files)
    return replace(snapshot, files=files)


def checkpoint_step(directory: Path | None) -> int | None:
    """The step a training would resume from in ``directory``: the marker's, else the one
    its framework's own files name (progress for the wrapper and the run report)."""
    if directory is None:
        return None
    step = read_marker(directory)
    if step is not None:
        return step
    from wrapper.checkpoint.layouts import layout_step

    return layout_step(directory)
