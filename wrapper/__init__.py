"""resched's in-task side: supervise the training entrypoint, classify how it ended, decide.

Training code imports this package for :func:`heartbeat`, so this module imports
nothing heavy: only the dependency-free heartbeat function.
"""

from __future__ import annotations

from wrapper.heartbeat import heartbeat

__all__ = ["heartbeat"]
