"""All-or-nothing restore of one directory: stage, verify, then swap; and healing.

A restore never writes the target's files one by one in place. It stages the whole
checkpoint in a private folder, verifies and fsyncs it, and only then puts it in place:

- ``atomic`` (the target is missing or an empty directory that is not a mount point,
  and its parent is writable): the staging folder is a SIBLING of the target,
  ``<parent>/.<name>.resched-restore-<32 hex>``, and the swap is one ``rename`` onto the
  target. A kill at any moment leaves the target as it was (missing / empty) or whole.
  A ``--force`` restore into a directory with files stages hard links of the files it
  does not replace beside the checkpoint's, and swaps the two trees in one step
  (``renameat2(RENAME_EXCHANGE)``); the old tree is then removed.
- ``journaled`` (a mount point, a parent we cannot write, a filesystem without links
  or RENAME_EXCHANGE): the staging folder is ``<target>/.resched-restore-<32 hex>/``; once it
  is verified, the journal ``<target>/.resched-restore-<32 hex>.commit`` is written
  (fsynced) and the files are renamed into place; the journal goes last. Before the
  journal the target is untouched; after it, the restore is committed and the next run
  rolls it forward (renames what is left). Publish refuses a directory with a journal.

:func:`heal` is the next run's half: sibling staging folders of this target are removed
(the target holds its old content), journaled restores are finished, staging folders
without a journal are removed. Everything it touches is named by the scheme above and
is a real directory or file (no link is followed); nothing else is looked at.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterable
from pathlib import Path

from wrapper.checkpoint import crashpoint
from wrapper.checkpoint.errors import UnsafePathError
from wrapper.checkpoint.marker import RESTORE_JOURNAL, RESTORE_STAGING, _fsync_dir, restamp_marker

_SIBLING = r"^\.{name}\.resched-restore-[0-9a-f]{{32}}$"
# A rename onto the target that cannot work: a mount point, another filesystem, a target
# that filled up meanwhile. The journaled swap does not need it.
_NO_RENAME = {errno.EBUSY, errno.EXDEV, errno.ENOTEMPTY, errno.EEXIST, errno.EPERM,
              errno.EACCES, errno.EROFS}


class Staging:
    """Where one restore stages its files, and how it puts them in place."""

    def __init__(self, target: Path, relpaths: set[str]) -> None:
        self.target = target
        token = uuid.uuid4().hex
        self.atomic = _can_swap_whole(target)
        root = target.parent / f".{target.name}.resched-restore-{token}" if self.atomic \
            else target / f".resched-restore-{token}"
        if self.atomic:
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                root.mkdir()
            except OSError as error:
                if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS,
                                       errno.ENAMETOOLONG):
                    raise
                self.atomic = False  # a parent we cannot write: stage inside the target
                root = target / f".resched-restore-{token}"
        if not self.atomic:
            target.mkdir(parents=True, exist_ok=True)
            root.mkdir()
        self.root = root
        # --force into a directory with files: they are kept (hard links in the staged
        # tree), and the swap exchanges the two trees in one step.
        self.others = self.atomic and _is_real_dir(target) and not _empty(target)
        if self.others:
            try:
                _link_others(target, root, relpaths)
            except OSError:
                _remove_tree(root)  # links not possible here (another filesystem): journal
                self.atomic = self.others = False
                root = target / f".resched-restore-{token}"
                root.mkdir()
                self.root = root
        self.journal = target / f".resched-restore-{token}.commit"
        crashpoint.reached("restore.after_stage_dir")

    def path(self, relpath: str) -> Path:
        return self.root / relpath

    def swap(self, staged: Iterable[tuple[str, list[int]]] | None = None) -> None:
        """Put the verified, fsynced staging folder in place (see the module docstring).
        ``staged``: (relative path, [size, mtime_ns, inode]) of every file the restore
        wrote into the staging folder, for the marker's file list (None: scan for it)."""
        crashpoint.reached("restore.after_verify")
        if self.atomic:
            try:
                # same inodes after the rename of the folder; after an exchange the
                # target's other files (hard links) belong to the list too: scan them
                restamp_marker(self.root, None if self.others else staged)
                if self.others:
                    _exchange(self.root, self.target)
                else:
                    os.rename(self.root, self.target)
            except OSError as error:
                if error.errno not in _NO_RENAME | {errno.EINVAL, errno.ENOSYS}:
                    raise
                self._journaled_from_sibling()
                return
            _fsync_dir(self.target.parent)
            crashpoint.reached("restore.after_swap")
            if self.others:
                _remove_tree(self.root)  # the old tree; its other files live on in target
            crashpoint.reached("restore.after_cleanup")
            return
        _write_journal(self.journal)
        _roll_forward(self.target, self.root, self.journal)
        crashpoint.reached("restore.after_cleanup")

    def _journaled_from_sibling(self) -> None:
        # The target turned out not to take a rename (a mount point, files appeared):
        # move the staged tree inside it first (same filesystem as the target? not
        # necessarily: copy), then swap with the journal.
        inner = self.target / f".resched-restore-{uuid.uuid4().hex}"
        self.target.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.root, inner, symlinks=True)
        _fsync_tree(inner)
        shutil.rmtree(self.root)
        self.root, self.atomic = inner, False
        self.journal = self.target / f"{inner.name}.commit"
        _write_journal(self.journal)
        _roll_forward(self.target, self.root, self.journal)

    def discard(self) -> None:
        """Remove the staging folder of a restore that failed before its swap."""
        if not self.journal.exists():
            _remove_tree(self.root)


def _can_swap_whole(target: Path) -> bool:
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(st.st_mode) or os.path.ismount(target):
        return False
    try:  # renaming over our own working directory would leave us in the deleted one
        if os.path.samefile(target, os.getcwd()):
            return False
    except OSError:
        return False
    return _empty(target) or _exchange_available()


def _empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is None


_RENAME_EXCHANGE = 2
_libc: object | None = None


def _exchange_available() -> bool:
    global _libc
    if _libc is None:
        try:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.renameat2  # type: ignore[attr-defined]  # glibc >= 2.28
        except (OSError, AttributeError):
            _libc = False
    return bool(_libc)


def _exchange(a: Path, b: Path) -> None:
    """Swap two directories in one step (renameat2 RENAME_EXCHANGE, Linux >= 3.15)."""
    import ctypes

    at_fdcwd = -100
    if _libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b),  # type: ignore[union-attr]
                       _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(b))


def _link_others(target: Path, staging: Path, keep: set[str]) -> None:
    """Hard-link every file of ``target`` that the checkpoint does not replace into
    ``staging`` (same inodes: a --force restore keeps them, unchanged, after the swap)."""
    for root, dirs, names in os.walk(target):
        base = Path(root)
        if base == target:
            dirs[:] = [d for d in dirs if not RESTORE_STAGING.match(d)]
        rel = base.relative_to(target)
        (staging / rel).mkdir(parents=True, exist_ok=True)
        for name in names + [d for d in dirs if os.path.islink(base / d)]:
            relpath = (rel / name).as_posix()
            if relpath in keep or (base == target and RESTORE_JOURNAL.match(name)):
                continue
            os.link(base / name, staging / rel / name, follow_symlinks=False)


def _write_journal(journal: Path) -> None:
    fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    try:
        os.write(fd, b"resched restore: committed, roll forward\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(journal.parent)


def _roll_forward(target: Path, staging: Path, journal: Path) -> None:
    """Rename every file still in ``staging`` into ``target`` (idempotent), then drop the
    journal and the staging folder: the committed restore is finished."""
    moved_dirs: set[Path] = set()
    for root, dirs, names in os.walk(staging):
        dirs.sort()
        base = Path(root)
        for name in sorted(names):
            source = base / name
            relpath = source.relative_to(staging).as_posix()
            final = safe_destination(target, relpath)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, final)
            moved_dirs.add(final.parent)
    crashpoint.reached("restore.after_swap")
    for folder in moved_dirs | {target}:
        _fsync_dir(folder)
    restamp_marker(target)  # other files of a --force restore belong to its list too
    journal.unlink(missing_ok=True)
    _fsync_dir(target)
    _remove_tree(staging)


def heal(target: Path) -> list[str]:
    """Finish or undo what interrupted restores into ``target`` left; what was done."""
    done: list[str] = []
    sibling = re.compile(_SIBLING.format(name=re.escape(target.name)))
    try:
        with os.scandir(target.parent) as entries:
            leftovers = [e.name for e in entries if sibling.match(e.name)]
    except OSError:
        leftovers = []
    for name in leftovers:
        if _remove_tree(target.parent / name):
            done.append(f"removed {target.parent / name} (an interrupted restore's staging)")
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return done
    if not stat.S_ISDIR(st.st_mode):
        return done
    with os.scandir(target) as entries:
        names = sorted(e.name for e in entries)
    for name in names:
        if RESTORE_JOURNAL.match(name):
            staging = target / name.removesuffix(".commit")
            if os.path.lexists(staging) and not _is_real_dir(staging):
                raise UnsafePathError(f"{staging} is not a directory; cannot finish the "
                                      "interrupted restore", fix="remove it and restore again")
            if os.path.lexists(staging):
                _roll_forward(target, staging, target / name)
            else:
                (target / name).unlink()
            done.append(f"finished the interrupted restore into {target}")
    for name in names:
        if RESTORE_STAGING.match(name) and os.path.lexists(target / name) and \
                not os.path.lexists(target / f"{name}.commit"):
            if _remove_tree(target / name):
                done.append(f"removed {target / name} (an interrupted restore's staging)")
    return done


def _is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _remove_tree(path: Path) -> bool:
    """Remove one of OUR staging folders (a real directory; rmtree never follows links)."""
    if not _is_real_dir(path):
        return False
    shutil.rmtree(path)
    return True


def _fsync_tree(root: Path) -> None:
    for folder, _, names in os.walk(root):
        for name in names:
            fd = os.open(Path(folder) / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(folder))


def safe_destination(target: Path, relpath: str) -> Path:
    """target/relpath, refusing any existing component that is a symlink or a non-dir."""
    current = target
    parts = relpath.split("/")
    for depth, part in enumerate(parts):
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            continue
        last = depth == len(parts) - 1
        if stat.S_ISLNK(st.st_mode) or (not last and not stat.S_ISDIR(st.st_mode)) or (
                last and stat.S_ISDIR(st.st_mode)):
            raise UnsafePathError(
                f"cannot restore {relpath!r}: {current} is in the way (a symlink, or a "
                "file where a directory belongs, or the reverse)",
                fix="restore into an empty directory",
            )
    return current

