"""OSMO's runtime tokens for the Slurm backend: the one definition lives in
:mod:`workflows.osmo_runtime` (dependency-free: the in-job helper imports it at every job start).
"""

from __future__ import annotations

from workflows.osmo_runtime import TOKEN, env_suffix

__all__ = ["TOKEN", "env_suffix"]
