"""The completion marker a training writes after a checkpoint is whole.

Dependency-free on purpose: the training process imports it (``from
wrapper.checkpoint.marker import mark_complete``) and must not pay for fsspec.

The rule the syncer relies on: the training writes each checkpoint file by tmp +
rename, then calls :func:`mark_complete` LAST. A snapshot is publishable only when the
marker exists and no checkpoint file is newer than it (see ``snapshot.py``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

MARKER_NAME = "resched-complete.json"


def mark_complete(directory: str | Path, step: int) -> None:
    """Record that the checkpoint of ``step`` in ``directory`` is complete (atomic)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    folder = Path(directory)
    target = folder / MARKER_NAME
    tmp = folder / f".{MARKER_NAME}.tmp-{os.getpid()}"
    payload = json.dumps({"step": step, "time": time.time()}).encode()
    with open(tmp, "wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    _fsync_dir(folder)


def read_marker(directory: str | Path) -> int | None:
    """The step recorded by the marker in ``directory``, or None (absent or unreadable)."""
    try:
        data = json.loads((Path(directory) / MARKER_NAME).read_bytes())
    except (OSError, ValueError):
        return None
    step = data.get("step") if isinstance(data, dict) else None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None
    return step


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
