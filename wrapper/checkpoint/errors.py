"""Errors of the checkpoint store (all one-line :class:`ReschedError` subclasses)."""

from __future__ import annotations

from wrapper.errors import ReschedError
from wrapper.redact import redact


class CheckpointError(ReschedError):
    """A publish, restore or verify that could not be done; the store is left as it was."""

    exit_code = 1

    def __str__(self) -> str:
        # Store URLs and library errors may carry credentials; whoever prints or logs
        # this error (CLI, syncer, wrapper) gets the redacted text.
        return redact(super().__str__())


class CheckpointBusyError(CheckpointError):
    """Another publisher holds the store's writer lease (single-writer store)."""


class UnsafePathError(CheckpointError):
    """A manifest or source path that would escape the directory, or a symlink."""


class SnapshotUnstableError(CheckpointError):
    """The directory changed while it was being published (a checkpoint still being written)."""
