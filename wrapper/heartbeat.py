"""``wrapper.heartbeat()``: tell ``resched wrap`` that training made progress.

The wrapper sets ``RESCHED_HEARTBEAT_FILE`` for the command it supervises; a heartbeat
touches that file (its mtime is the signal) and the wrapper's hang detector watches
the mtime. Without the variable (training run outside the wrapper) it does nothing.

It is called every training step, so it must cost next to nothing: it imports only
``os`` and ``time`` and touches the file at most once per 0.1 s
(``RESCHED_HEARTBEAT_MIN_INTERVAL`` overrides), which keeps the cost to one clock read
per call while the hang detector still sees progress well within its poll.
"""

from __future__ import annotations

import os
import time

HEARTBEAT_ENV = "RESCHED_HEARTBEAT_FILE"
MIN_INTERVAL_ENV = "RESCHED_HEARTBEAT_MIN_INTERVAL"
_DEFAULT_MIN_INTERVAL_S = 0.1

# When the environment was last looked at (monotonic), and the interval read then. The
# common path is one clock read and a comparison: the environment is read, and the file
# touched, at most once per interval.
_last_touch_s = float("-inf")
_interval_s = _DEFAULT_MIN_INTERVAL_S


def _min_interval_s() -> float:
    try:
        return float(os.environ.get(MIN_INTERVAL_ENV, _DEFAULT_MIN_INTERVAL_S))
    except ValueError:
        return _DEFAULT_MIN_INTERVAL_S


def heartbeat() -> None:
    """Record progress for the wrapper's hang detector (no-op outside ``resched wrap``)."""
    global _last_touch_s, _interval_s
    now = time.monotonic()
    if now - _last_touch_s < _interval_s:
        return
    _last_touch_s, _interval_s = now, _min_interval_s()
    path = os.environ.get(HEARTBEAT_ENV)
    if not path:
        return
    try:
        os.utime(path, None)
    except FileNotFoundError:
        try:
            with open(path, "a"):
                pass
        except OSError:
            return  # a heartbeat must never break training
    except OSError:
        return
