"""Process-group helpers on Linux: list, signal and reap the processes of a task.

A task's processes are its process group AND every descendant of it: launchers start
ranks in sessions of their own (torchrun's workers leave the group), so a group kill
alone would leave ranks running, holding GPUs. Descendants are found through the
``ppid`` links in ``/proc/<pid>/stat``; once their parent dies they are re-parented to
the wrapper (a subreaper), so every process ever seen in a task's tree is remembered
by (pid, start time) and stays a member until it is reaped; the start time guards
against a recycled pid. Zombies are listed too, so "no members" means all were
reaped. Elsewhere ``killpg(pgid, 0)`` is the fallback.
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


# pgid -> {pid: start time} of every process seen in that task's tree.
_known: dict[int, dict[int, int]] = {}


def kill_group(pgid: int, signum: int) -> None:
    """Signal every process of the task once; processes already gone are fine."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass
    for pid, _state, _ppid in group_members(pgid):
        fields = _stat_fields(str(pid))
        if fields is not None and fields[2] == pgid:
            # killpg reached it already: a second SIGTERM could land while its handler
            # is saving or while it shuts down, and kill a training that did save.
            continue
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def forget_group(pgid: int) -> None:
    """Drop what was remembered about a task whose processes are all reaped."""
    _known.pop(pgid, None)


def _stat_fields(pid: str) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, start time) of a process, or None if it vanished."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ')'.
    fields = data[data.rfind(b")") + 2:].split()
    if len(fields) < 20:
        return None
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def stop_group(pgid: int, signum: int) -> None:
    """Send a stop signal, then SIGCONT: a stopped (SIGSTOP'd, traced) process only acts
    on its SIGTERM once continued, and should get to shut down gracefully (as NVRx does)."""
    kill_group(pgid, signum)
    kill_group(pgid, signal.SIGCONT)


def group_members(pgid: int) -> list[tuple[int, str, int]]:
    """(pid, state, ppid) of every process of the task, zombies included: the group,
    its descendants (in whatever session) and remembered members re-parented since."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [(pgid, "?", 0)]
    table: dict[int, tuple[str, int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields is not None:
                table[int(entry)] = fields
    known = _known.setdefault(pgid, {})
    members = {
        pid for pid, (_, _, pgrp, start) in table.items()
        if pgrp == pgid or known.get(pid) == start
    }
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    stack = list(members)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in members:
                members.add(child)
                stack.append(child)
    members.discard(os.getpid())
    _known[pgid] = {pid: table[pid][3] for pid in members}
    return [(pid, table[pid][0], table[pid][1]) for pid in sorted(members)]


def reap_group_zombies(pgid: int) -> None:
    """Reap members of the group that are zombies waiting for this process."""
    me = os.getpid()
    for pid, state, ppid in group_members(pgid):
        if state == "Z" and ppid == me:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass

