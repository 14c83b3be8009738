"""Wake the moment a process exits, instead of polling for it on a timer.

Linux (>= 5.3) gives a *pidfd* for a process: a file descriptor that becomes readable
when that process exits, whoever its parent is. The supervisor waits on the pidfd of
its direct child while it watches, and on the pidfds of every leftover member of the
task while it sweeps, so the next attempt can start as soon as the last process of the
previous one is gone (no 20 ms sleep per round, no ``Popen.wait(timeout)`` busy loop,
which sleeps up to 50 ms between checks).

A pidfd pins its process: the pid cannot be reused while the fd is open, so once the
start time read *after* ``pidfd_open`` matches the one remembered, the fd is known to
name the right process and not a recycled pid. Where pidfds are missing (older kernels,
seccomp filters, other systems) every wait falls back to a short sleep, as before.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable, Iterable

# How long to sleep between checks when the kernel offers no pidfd, or when every
# remaining member is a zombie whose parent is outside the task (no exit to wait for).
FALLBACK_TICK_S = 0.01
_NO_PIDFD = False  # set once pidfd_open failed with ENOSYS/EPERM: stop trying


def pidfd_available() -> bool:
    return hasattr(os, "pidfd_open") and not _NO_PIDFD


def open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``, or None (no such process, or no pidfd support)."""
    global _NO_PIDFD
    if not pidfd_available():
        return None
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except OSError:  # ENOSYS (kernel < 5.3), EPERM (seccomp): fall back to polling
        _NO_PIDFD = True
        return None


def wait_readable(fds: Iterable[int], timeout_s: float) -> bool:
    """Block until one of ``fds`` is readable (a process exited) or ``timeout_s`` ran
    out; True when woken by an exit. With no fd it sleeps one fallback tick at most."""
    fds = list(fds)
    timeout_s = max(0.0, timeout_s)
    if not fds:
        time.sleep(min(timeout_s, FALLBACK_TICK_S))
        return False
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    # PEP 475: a signal handler running meanwhile does not cut the wait short.
    return bool(poller.poll(int(timeout_s * 1000) + (1 if timeout_s % 0.001 else 0)))


class ExitWatch:
    """pidfds of a changing set of live processes, keyed by (pid, start time).

    ``track(members)`` opens fds for processes not yet watched and closes those of
    processes no longer listed; ``wait(timeout)`` returns when one of them exits.
    ``start_time(pid)`` re-reads a pid's start time to verify a freshly opened fd.
    """

    def __init__(self, start_time: Callable[[int], int | None]) -> None:
        self._start_time = start_time
        self._fds: dict[tuple[int, int], int] = {}

    def __enter__(self) -> ExitWatch:  # noqa: PYI034 (py3.10 has no typing.Self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def track(self, live: Iterable[tuple[int, int]]) -> int:
        """Watch exactly these (pid, start time) pairs; return how many have an fd."""
        wanted = set(live)
        for key in [key for key in self._fds if key not in wanted]:
            os.close(self._fds.pop(key))
        for key in wanted - self._fds.keys():
            fd = open_pidfd(key[0])
            if fd is None:
                continue
            if self._start_time(key[0]) != key[1]:
                os.close(fd)  # gone and its pid reused between the listing and the open
                continue
            self._fds[key] = fd
        return len(self._fds)

    def wait(self, timeout_s: float, *, complete: bool = True) -> bool:
        """Wait for an exit among the tracked processes. ``complete`` says that every
        live process is tracked; otherwise (no pidfd for some) the wait is capped at a
        fallback tick, so an untracked exit is still noticed soon."""
        if not complete:
            timeout_s = min(timeout_s, FALLBACK_TICK_S)
        return wait_readable(self._fds.values(), timeout_s)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
