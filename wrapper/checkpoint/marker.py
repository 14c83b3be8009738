"""The completion marker a training writes after a checkpoint is whole.

Dependency-free on purpose: the training process imports it (``from
wrapper.checkpoint.marker import mark_complete``) and must not pay for fsspec.

The training writes each checkpoint file (ideally by tmp + rename), then calls
:func:`mark_complete` LAST. The marker records the step and the (size, mtime_ns, inode)
of every file in the directory at that moment, so a publisher can tell exactly whether
the directory still holds that complete checkpoint: any file written, replaced, added or
removed afterwards makes the snapshot differ from the marker's list. Publishers compare
size and mtime_ns only (the inode is kept for diagnosis): a copy that keeps times
(`cp -a` of a restored checkpoint) is the same checkpoint and stays publishable. ``.resched/`` (the wrapper's own
state) and temp files named ``*.resched-tmp-*`` are not part of the list.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from wrapper.checkpoint.links import sibling_target

MARKER_NAME = "resched-complete.json"
STATE_DIR = ".resched"
TEMP_TAG = ".resched-tmp-"
# A restore's staging folder inside the target and its commit journal (restore_swap.py):
# never part of a checkpoint, never published.
RESTORE_STAGING = re.compile(r"^\.resched-restore-[0-9a-f]{32}$")
RESTORE_JOURNAL = re.compile(r"^\.resched-restore-[0-9a-f]{32}\.commit$")


def is_restore_leftover(name: str) -> bool:
    return bool(RESTORE_STAGING.match(name) or RESTORE_JOURNAL.match(name))


def mark_complete(directory: str | Path, step: int) -> None:
    """Record that the checkpoint of ``step`` in ``directory`` is complete (atomic)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    _write_marker(Path(directory), {"step": step, "time": time.time()})


def read_marker(directory: str | Path) -> int | None:
    """The step recorded by the marker in ``directory``, or None (absent or unreadable)."""
    data = marker_data(directory)
    step = data.get("step") if data else None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None
    return step


def marker_data(directory: str | Path) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(directory) / MARKER_NAME).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def restamp_marker(directory: str | Path,
                   files: Iterable[tuple[str, list[int]]] | None = None) -> None:
    """Re-record the file list of an existing marker (after a verified restore wrote the
    same files anew: new inodes and times, same content). Keeps step and time.

    ``files``: (relative path, [size, mtime_ns, inode]) of EVERY regular file in
    ``directory``, when the caller knows them (a restore's staged tree, each file
    fstat-ed as it was written: no second walk of 100k files); the marker's own rules
    (which files it covers) are applied to them here. None: the folder is scanned."""
    data = marker_data(directory)
    step = data.get("step") if data else None
    if data is not None and not isinstance(step, bool) and isinstance(step, int) and step >= 0:
        listed = None if files is None else {path: stats for path, stats in files
                                             if marker_covers(path)}
        _write_marker(Path(directory), {"step": step, "time": data.get("time")}, listed)


def _skipped_top_folder(name: str) -> bool:
    return name == STATE_DIR or is_restore_leftover(name)


def _skipped_file(name: str, at_top: bool) -> bool:
    return TEMP_TAG in name or (at_top and (name == MARKER_NAME or is_restore_leftover(name)))


def marker_covers(relpath: str) -> bool:
    """Whether the marker lists the regular file ``relpath`` ("/"-separated): the rules
    of :func:`checkpoint_files`, for one path."""
    top, inside, _ = relpath.partition("/")
    if inside and _skipped_top_folder(top):
        return False
    return not _skipped_file(relpath.rpartition("/")[2], not inside)


def checkpoint_files(folder: Path) -> dict[str, list[int]]:
    """relative path -> [size, mtime_ns, inode] of every file the marker covers."""
    found: dict[str, list[int]] = {}
    # string paths and scandir: a Path per file cost seconds for 100k files
    pending = [(os.fspath(folder), "")]
    while pending:
        root, prefix = pending.pop()
        at_top = not prefix
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue  # as os.walk: a folder that cannot be listed is left out
        for entry in entries:
            name = entry.name
            if entry.is_dir(follow_symlinks=False):
                if not (at_top and _skipped_top_folder(name)):
                    pending.append((entry.path, f"{prefix}{name}/"))
                continue
            if entry.is_symlink() and entry.is_dir():
                continue  # as os.walk: a link to a folder is neither listed nor entered
            if _skipped_file(name, at_top):
                continue
            st = entry.stat(follow_symlinks=False)
            if entry.is_symlink():  # a link to a file beside it is published as that file
                target = sibling_target(entry.path, os.fspath(folder))
                st = target[1] if target is not None else st
            found[prefix + name] = [st.st_size, st.st_mtime_ns, st.st_ino]
    return found


def _write_marker(folder: Path, data: dict[str, Any],
                  files: dict[str, list[int]] | None = None) -> None:
    data["files"] = checkpoint_files(folder) if files is None else files
    target = folder / MARKER_NAME
    tmp = folder / f".{MARKER_NAME}{TEMP_TAG}{os.getpid()}"
    with open(tmp, "wb") as handle:
        handle.write(json.dumps(data).encode())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
