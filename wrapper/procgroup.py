"""Process-group helpers on Linux: list, signal and reap the members of a group.

Membership is read from ``/proc/<pid>/stat`` (field ``pgrp``), which also lists zombies,
so "the group is empty" means every member has been reaped. Elsewhere ``killpg(pgid, 0)``
is the fallback.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_CHILD_SUBREAPER = 36
_subreaper_set = False


def become_subreaper() -> None:
    """Make orphaned descendants reparent to this process, so it can reap them (Linux)."""
    global _subreaper_set
    if _subreaper_set or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        return
    _subreaper_set = True


def kill_group(pgid: int, signum: int) -> None:
    """Signal every member of the group; a group that is already gone is fine."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _stat_fields(pid: str) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of a process, or None if it vanished."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ')'.
    fields = data[data.rfind(b")") + 2:].split()
    if len(fields) < 3:
        return None
    return fields[0].decode(), int(fields[1]), int(fields[2])


def stop_group(pgid: int, signum: int) -> None:
    """Send a stop signal, then SIGCONT: a stopped (SIGSTOP'd, traced) process only acts
    on its SIGTERM once continued, and should get to shut down gracefully (as NVRx does)."""
    kill_group(pgid, signum)
    kill_group(pgid, signal.SIGCONT)


def group_members(pgid: int) -> list[tuple[int, str, int]]:
    """(pid, state, ppid) of every process in the group, zombies included."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [(pgid, "?", 0)]
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is not None and fields[2] == pgid:
            members.append((int(entry), fields[0], fields[1]))
    return members


def reap_group_zombies(pgid: int) -> None:
    """Reap members of the group that are zombies waiting for this process."""
    me = os.getpid()
    for pid, state, ppid in group_members(pgid):
        if state == "Z" and ppid == me:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

