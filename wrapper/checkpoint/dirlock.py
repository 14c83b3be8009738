"""Locks on one local checkpoint directory that live OUTSIDE it.

The directory is the training's, and a start-up restore wants it empty: a lock file in it
would make it non-empty, and a lock on the directory's own inode is lost when an atomic
restore renames the staged tree onto it. So the lock is an ``flock`` on
``<cache>/locks/<dir key>.<purpose>.lock`` (``<dir key>``: a hash of the directory's real
path; in the temp dir when the cache dir cannot be written, e.g. a read-only home in a
container), dropped by the kernel when its holder dies. Two purposes:

- ``publish``: two publishes of one directory never overlap (the syncer, across
  processes; held per round);
- ``wrap``: one ``resched wrap`` owns a directory whose store it owns (``--checkpoint-url``)
  for its whole life: taken before the start-up restore, so a second wrapper is refused
  with one line before either restores (docs/checkpoint.md, "One wrapper per checkpoint
  directory").
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from pathlib import Path
from typing import IO

from wrapper.cache_dir import cache_dir
from wrapper.checkpoint.errors import CheckpointError
from wrapper.checkpoint.hashing import dir_key
from wrapper.errors import ReschedError


class CheckpointDirBusy(ReschedError):
    """Another ``resched wrap`` owns this checkpoint directory (and its store)."""


class DirLock:
    """An fcntl lock for one local directory, kept outside it (module docstring)."""

    def __init__(self, directory: Path, purpose: str = "") -> None:
        name = f"{dir_key(directory)}{'.' + purpose if purpose else ''}.lock"
        self._paths = (cache_dir() / "locks" / name,
                       Path(tempfile.gettempdir()) / f"resched-locks-{os.getuid()}" / name)
        self._handle: IO[bytes] | None = None

    def __enter__(self) -> DirLock:  # noqa: PYI034 (py3.10 has no typing.Self)
        return self

    def acquire(self, *, wait_s: float) -> bool:
        for path in self._paths:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._handle = path.open("ab")  # not inherited by the training (PEP 446)
                break
            except OSError:
                continue
        if self._handle is None:
            raise CheckpointError(f"cannot create a lock file in {self._paths[0].parent} or "
                                  f"{self._paths[1].parent}",
                                  fix="set RESCHED_CACHE_DIR to a writable directory")
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    self.release()
                    return False
                time.sleep(0.05)

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing drops the flock
            self._handle = None

    def __exit__(self, *exc: object) -> None:
        self.release()


def own_checkpoint_dir(directory: Path) -> DirLock:
    """The ``wrap`` lock of ``directory``, held until released; raises
    :class:`CheckpointDirBusy` (one line) when another wrapper holds it."""
    lock = DirLock(directory, "wrap")
    if not lock.acquire(wait_s=0.0):
        raise CheckpointDirBusy(
            "another resched wrap owns this checkpoint directory (it restores into it and "
            "publishes it to its store); nothing was restored or changed",
            where=str(directory),
            fix="wait for the other wrapper to end, or give each run its own --checkpoint-dir")
    return lock
