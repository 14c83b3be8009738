"""NVRx fault-tolerance state (``ft_state.json``) that travels with the checkpoint.

NVRx calibrates its heartbeat / section timeouts from the intervals it observed
(``RankMonitorClient.state_dict()`` -> ``{"current_timeouts": {"heartbeat": ...,
"section": ...}}``); trainings persist that dict as JSON (Megatron: ``<save>/ft_state.json``,
the PTL sections callback: ``<log_dir>/ft_state/_ft_state_.json``) and load it at start.
A file outside the checkpoint directory is lost when the task moves to another node,
and the next run starts again from the long uncalibrated defaults.

``resched wrap --ft-state PATH`` keeps a copy in the wrapper's state directory (which
travels with the checkpoint) after every attempt, and puts it back at PATH before an
attempt when PATH is missing. It never overwrites a file the training wrote and never
follows a link.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

COPY_NAME = "ft_state.json"
TIMEOUTS_KEY = "current_timeouts"  # RankMonitorClient.CURRENT_TIMEOUTS_STATE_KEY


def _copy_path(state_dir: Path) -> Path:
    return state_dir / "nvrx" / COPY_NAME


def read_ft_state(path: Path) -> dict[str, Any] | None:
    """The parsed state when ``path`` is a regular file holding NVRx timeouts, else None."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, Mapping) or not isinstance(data.get(TIMEOUTS_KEY), Mapping):
        return None
    return dict(data)


def restore_ft_state(path: Path, state_dir: Path) -> str | None:
    """Put the carried copy at ``path`` if nothing is there; a line to log, or None."""
    copy = _copy_path(state_dir)
    if os.path.lexists(path) or read_ft_state(copy) is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_copy(copy, path)
    return f"restored NVRx ft_state (calculated timeouts) to {path}"


def save_ft_state(path: Path, state_dir: Path) -> dict[str, Any] | None:
    """Copy a valid state at ``path`` into the state dir; the timeouts it holds, or None."""
    data = read_ft_state(path)
    if data is None:
        return None
    copy = _copy_path(state_dir)
    copy.parent.mkdir(parents=True, exist_ok=True)
    _atomic_copy(path, copy)
    return dict(data[TIMEOUTS_KEY])


def _atomic_copy(source: Path, target: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".resched-tmp", dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
