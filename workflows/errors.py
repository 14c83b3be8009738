"""Errors of the control side; all derive from the one root, ``ReschedError``."""

from __future__ import annotations

from wrapper.errors import ReschedError

__all__ = ["ReschedError", "RenderError", "SpecError", "UsageError", "BackendError"]


class UsageError(ReschedError):
    """A command-line argument that cannot be used (``--set novalue``)."""


class RenderError(ReschedError):
    """The template could not be rendered (Jinja error, undefined value, limit hit)."""


class SpecError(ReschedError):
    """The rendered spec is not a valid OSMO v2 workflow."""


class BackendError(ReschedError):
    """A backend could not prepare or submit the request (tool missing, refused)."""

    exit_code = 1
