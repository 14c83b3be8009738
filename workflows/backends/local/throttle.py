"""``python -m workflows.backends.local.throttle TOKEN TOP_PID FACTOR PARENT_PID``: the
``slow`` chaos fault's duty cycle, in a process of its own (see inject.Throttle: a
thread of the executor wakes late behind the GIL, and late stops are what NVRx misses).

It ends when the workload is gone, when SIGTERM / SIGINT / SIGHUP arrive, or when its
parent (the executor) dies, and it sends SIGCONT to what it stopped on every way out."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from types import FrameType

from workflows.backends.local.inject import Throttle

_PR_SET_PDEATHSIG = 1


def _leave(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)  # unwinds through the duty cycle's finally: SIGCONT is sent


def _die_with(parent: int) -> None:
    try:  # the kernel sends SIGTERM when the parent dies (Linux)
        armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != parent:  # it died before prctl took effect
        raise SystemExit(0)
    if armed:
        return

    def watch() -> None:  # no prctl: look every second (a thread only here: it takes the GIL)
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str]) -> int:
    token, top_pid, factor, parent = argv[0], int(argv[1]), float(argv[2]), int(argv[3])
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _leave)
    _die_with(parent)
    Throttle(token, top_pid, factor).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
