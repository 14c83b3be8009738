"""The checkpoint store: atomic, incremental, verified checkpoints over fsspec URLs.

``marker`` is imported by training code and stays dependency-free, so this package's
import is light: everything else loads on first use (PEP 562 ``__getattr__``).
"""

from __future__ import annotations

import importlib
from typing import Any

from wrapper.checkpoint.marker import MARKER_NAME, mark_complete, read_marker

_LAZY = {
    "CheckpointStore": "wrapper.checkpoint.store",
    "PeriodicSyncer": "wrapper.checkpoint.syncer",
    "stage_url": "wrapper.checkpoint.stage",
    "upload_plain": "wrapper.checkpoint.stage",
    "CheckpointError": "wrapper.checkpoint.errors",
    "CheckpointBusyError": "wrapper.checkpoint.errors",
    "UnsafePathError": "wrapper.checkpoint.errors",
    "SnapshotUnstableError": "wrapper.checkpoint.errors",
    "PublishResult": "wrapper.checkpoint.results",
    "RestoreResult": "wrapper.checkpoint.results",
    "CheckpointInfo": "wrapper.checkpoint.results",
    "VerifyResult": "wrapper.checkpoint.results",
    "StageResult": "wrapper.checkpoint.results",
    "RetryPolicy": "wrapper.checkpoint.retry",
}

__all__ = [
    "MARKER_NAME",
    "CheckpointBusyError",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointStore",
    "PeriodicSyncer",
    "PublishResult",
    "RestoreResult",
    "RetryPolicy",
    "SnapshotUnstableError",
    "StageResult",
    "UnsafePathError",
    "VerifyResult",
    "mark_complete",
    "read_marker",
    "stage_url",
    "upload_plain",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'wrapper.checkpoint' has no attribute {name!r}")
