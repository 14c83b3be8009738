"""Backends: a name -> factory registry (imported lazily: slurm code never loads for osmo)."""

from __future__ import annotations

import importlib

from workflows.backends.base import Backend
from workflows.errors import UsageError

_REGISTRY: dict[str, str] = {
    "local": "workflows.backends.local:LocalBackend",
    "osmo": "workflows.backends.osmo:OsmoBackend",
    "slurm": "workflows.backends.slurm:SlurmBackend",
}

BACKEND_NAMES = tuple(_REGISTRY)


def get_backend(name: str) -> Backend:
    """Return the backend called ``name``; an unknown name lists the valid ones."""
    target = _REGISTRY.get(name)
    if target is None:
        raise UsageError(
            f"unknown backend {name!r}", fix=f"use one of: {', '.join(BACKEND_NAMES)}"
        )
    module_name, _, class_name = target.partition(":")
    backend: Backend = getattr(importlib.import_module(module_name), class_name)()
    return backend
