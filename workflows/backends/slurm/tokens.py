"""OSMO's runtime tokens and how the Slurm backend names their shell variables.

Dependency-free: the in-job helper imports it at every job start.
"""

from __future__ import annotations

import re

# OSMO's protected runtime tokens (no spaces inside the braces).
TOKEN = re.compile(r"\{\{(uuid|workflow_id|output|input:[^}]+|host:[^}]+)\}\}")


def env_suffix(task_name: str) -> str:
    """``worker-1`` -> ``WORKER_1`` (OSMO treats ``-`` and ``_`` in names as equal, any case)."""
    return task_name.lower().replace("_", "-").replace("-", "_").upper()
