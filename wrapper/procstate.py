"""Whether a process still runs, zombies counted as ended (used by the store lease and
the Slurm job side's checkpoint timer)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and has not exited; a zombie (exited, not yet reaped)
    has ended. When /proc cannot tell, assume alive: callers then wait or keep a lease,
    which is the safe side."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b") ", 1)[-1][:1] != b"Z"
    except OSError:
        return True
