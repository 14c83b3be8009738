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
import time
from collections.abc import Callable

from wrapper.exitwatch import ExitWatch

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
# pgid -> start time of the task's first process: an orphan re-parented to this process
# (the subreaper) that started no earlier is the task's, even if no census saw its parent
# (a `setsid -f` or double-forked daemon whose parents exited between two censuses).
_orphan_floor: dict[int, int] = {}


def adopt_orphans(pgid: int) -> None:
    """Count as the task's every process re-parented to us that started with it or later.

    The wrapper starts no other process while a task runs, so such an orphan can only
    come from the task; processes that were our children before (a test harness's
    servers) started earlier and are left alone."""
    started = start_time(pgid)
    if started is not None:
        _orphan_floor[pgid] = started


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
    _orphan_floor.pop(pgid, None)


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
    me, floor = os.getpid(), _orphan_floor.get(pgid)
    members = {
        pid for pid, (_, ppid, pgrp, start) in table.items()
        if pgrp == pgid or known.get(pid) == start
        or (floor is not None and ppid == me and start >= floor)
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


def _reap(members: list[tuple[int, str, int]]) -> int:
    # Each zombie by its pid, never os.waitid(P_ALL): that would also take the exit
    # status of the Popen child (or of any other subprocess the wrapper runs) from
    # whoever waits for it.
    me, reaped = os.getpid(), 0
    for pid, state, ppid in members:
        if state == "Z" and ppid == me:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped += 1
            except ChildProcessError:
                pass
    return reaped


def start_time(pid: int) -> int | None:
    """The start time (clock ticks since boot) of a process, or None if it is gone."""
    fields = _stat_fields(str(pid))
    return None if fields is None else fields[3]


def wait_group_gone(pgid: int, timeout_s: float, *,
                    each_round: Callable[[], object] | None = None,
                    clock: Callable[[], float] = time.monotonic) -> bool:
    """Reap the task's zombies until no member is left (True) or ``timeout_s`` ran out.

    Woken by exits (a pidfd per live member), not by a timer: the round after the last
    member exits finds the task empty. ``each_round`` runs before every census (the
    SIGKILL phase re-signals there, for children forked by a dying member).
    """
    deadline = clock() + timeout_s
    with ExitWatch(start_time) as watch:
        while True:
            if each_round is not None:
                each_round()
            members = group_members(pgid)
            if _reap(members):
                members = group_members(pgid)
            if not members:
                return True
            remaining = deadline - clock()
            if remaining <= 0:
                return False
            # Zombies are not waited on: ours were just reaped; another member's
            # zombie goes when that member reaps it or exits (an exit wakes us).
            known = _known.get(pgid, {})
            live = [(pid, known[pid]) for pid, state, _ in members
                    if state != "Z" and pid in known]
            tracked = watch.track(live)
            watch.wait(remaining, complete=tracked == len(live))
