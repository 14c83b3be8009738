"""Find and stop every process of a task, however deep or detached it is.

Each task attempt is started in its own process group with a unique
``RESCHED_TASK_TOKEN`` in its environment. Launchers (the wrapper, torchrun) may put
their children in new sessions, and a child whose parent died is re-parented away,
so the process group alone cannot find everything; the token can: every descendant
inherits it. Stopping a task is SIGTERM to its group (and SIGCONT, so a stopped
process can act on it), a grace period, then SIGKILL to every process holding the
token.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

TOKEN_ENV = "RESCHED_TASK_TOKEN"
_PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    argv: tuple[str, ...]


def _read_proc(pid: int) -> Proc | None:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    argv = tuple(a.decode(errors="replace") for a in raw.split(b"\0") if a)
    return Proc(pid=pid, ppid=int(fields[1]), state=fields[0], argv=argv)


def _all_pids() -> Iterator[int]:
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            yield int(entry.name)


def _has_token(pid: int, token: bytes) -> bool:
    try:
        return token in (_PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return False


def task_processes(token: str) -> dict[int, Proc]:
    """Every live (non-zombie) process started by the task attempt with ``token``."""
    needle = f"{TOKEN_ENV}={token}".encode()
    found = {}
    for pid in _all_pids():
        if pid != os.getpid() and _has_token(pid, needle):
            proc = _read_proc(pid)
            if proc is not None and proc.state != "Z":
                found[pid] = proc
    return found


def is_wrapper(proc: Proc) -> bool:
    """``resched wrap ...`` (console script) or ``python -m workflows.cli wrap``."""
    for index, arg in enumerate(proc.argv[:-1]):
        if os.path.basename(arg) == "resched" and proc.argv[index + 1] == "wrap":
            return True
        if arg == "workflows.cli" and proc.argv[index + 1] == "wrap":
            return True
    return False


def descendants(procs: dict[int, Proc], root: int) -> list[Proc]:
    children: dict[int, list[Proc]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc)
    out, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child.pid)
    return out


def workload(procs: dict[int, Proc], top_pid: int) -> tuple[Proc | None, list[Proc]]:
    """(the wrapper, the processes it supervises); without a wrapper, all below the top."""
    wrapper = next((p for p in sorted(procs.values(), key=lambda p: p.pid) if is_wrapper(p)), None)
    root = wrapper.pid if wrapper is not None else top_pid
    below = descendants(procs, root)
    if wrapper is None and top_pid in procs:
        below = [procs[top_pid], *below]
    return wrapper, below


def leaves(procs: list[Proc]) -> list[Proc]:
    """Processes with no children among ``procs`` (the training ranks under a launcher)."""
    parents = {p.ppid for p in procs}
    return [p for p in procs if p.pid not in parents]


def send(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # gone already
        return None


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_task(
    pgid: int,
    token: str,
    *,
    is_done: Callable[[], bool],
    grace_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """SIGTERM the task's group and every process of the task outside it, wait ``grace_s``
    for them to end, then SIGKILL what is left."""
    signal_group(pgid, signal.SIGTERM)
    procs = task_processes(token)
    # A process that left the group (setsid: a daemon the task started) gets the same
    # graceful TERM; without it a Ctrl-C waited the whole grace (20 s) for it, then
    # killed it. Not what runs under `resched wrap`: the wrapper stops its own training
    # (with the stop signal it was given) and sweeps what reparents to it (a subreaper).
    wrapped = {p.pid for w in procs.values() if is_wrapper(w) for p in descendants(procs, w.pid)}
    send([pid for pid in procs if pid not in wrapped and _pgid(pid) != pgid], signal.SIGTERM)
    send(list(procs), signal.SIGCONT)  # a SIGSTOPped (hung) process must see the TERM
    deadline = clock() + grace_s
    while clock() < deadline and not (is_done() and not task_processes(token)):
        sleep(0.05)
    kill_all(pgid, token, clock=clock, sleep=sleep)


def kill_all(
    pgid: int,
    token: str,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """SIGKILL the group and every process holding ``token`` until none is left (max 5 s)."""
    deadline = clock() + 5.0
    while True:
        signal_group(pgid, signal.SIGKILL)
        left = list(task_processes(token))
        if not left or clock() > deadline:
            return
        send(left, signal.SIGKILL)
        sleep(0.05)
