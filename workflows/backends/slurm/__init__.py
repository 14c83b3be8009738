"""Slurm backend: one sbatch job per group, requeue on RESCHEDULE, failing nodes excluded.

See docs/slurm.md. ``dry_run`` is pure and returns a :class:`SlurmRequest` whose
``materialize()`` is the exact sbatch script; ``submit`` writes it and runs sbatch.

Names are imported lazily: the in-job helpers (``python -m
workflows.backends.slurm.jobside``) run at every job start and must not pay for the
spec models.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SbatchJob": "workflows.backends.slurm.backend",
    "SlurmBackend": "workflows.backends.slurm.backend",
    "SlurmRequest": "workflows.backends.slurm.backend",
    "SlurmOptions": "workflows.backends.slurm.script",
}

__all__ = ["SbatchJob", "SlurmBackend", "SlurmOptions", "SlurmRequest"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
