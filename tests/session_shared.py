"""Work a test session does once for all its pytest-xdist workers.

A session-scoped fixture runs once per xdist worker, each in its own base temp folder
(``.../pytest-N/popen-gwK``). Work every worker only reads (a reference training run, a
compiled rule database) is done by the first worker that needs it, in the folder the
session's workers share (``.../pytest-N``), under a lock the others wait on.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the session's workers share (the base temp folder without xdist)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's own
    return root


@contextmanager
def session_lock(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """Hold the session-wide lock ``name`` (one worker at a time); yields the shared
    folder. The lock is released when its file closes, also when the body raises."""
    root = session_folder(tmp_path_factory)
    with open(root / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield root
