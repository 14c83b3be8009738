#!/usr/bin/env python3
"""Kill -> the supervisor has reaped the task, with exit events (pidfd) vs polling.

A launcher (python) starts two "ranks" in sessions of their own, like torchrun; the
benchmark SIGKILLs all three at once (what a node fault or `kill -9` does) and measures
how long ``Supervisor.run()`` takes from the kill to its return: the exit seen, the
leftover ranks reaped, the pipes drained. Rounds alternate between the pidfd path and
the polling fallback (``Popen.wait(timeout)`` and short sleeps, what main did before)
in one process, so both see the same machine load. Prints medians and the ratio.

    .venv/bin/python benchmarks/reap_bench.py --rounds 20
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from wrapper import exitwatch
from wrapper.hang import HangSettings
from wrapper.supervise import SignalRelay, SuperviseOptions, Supervisor

LAUNCHER = """\
import subprocess, sys, time
rank = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(600)"]
ranks = [subprocess.Popen(rank, start_new_session=True, stdout=subprocess.PIPE) for _ in range(2)]
for proc in ranks:
    proc.stdout.readline()
print(" ".join(str(p.pid) for p in ranks), flush=True)
time.sleep(600)
"""


class _Pids:
    """Feed that catches the launcher's line naming its ranks."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.ready = threading.Event()

    def __call__(self, text: str, _stream: str) -> None:
        for line in text.splitlines():
            if line and all(part.isdigit() for part in line.split()):
                self.pids = [int(part) for part in line.split()]
                self.ready.set()


def one_round(script: Path, *, pidfd: bool) -> float:
    exitwatch._NO_PIDFD = not pidfd  # the A/B switch of this benchmark
    feed = _Pids()
    devnull = os.open(os.devnull, os.O_WRONLY)
    supervisor = Supervisor(
        [sys.executable, str(script)], env=dict(os.environ), feed_text=feed,
        relay=SignalRelay(),
        options=SuperviseOptions(grace_s=30.0, poll_s=0.05, hang=HangSettings(),
                                 stdout_fd=devnull, stderr_fd=devnull))
    killed_at: list[float] = []

    def kill_when_ready() -> None:
        if not feed.ready.wait(60):
            return
        group = supervisor_pgid[0]
        killed_at.append(time.monotonic())
        for pid in (*feed.pids, group):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    supervisor_pgid: list[int] = []
    original = supervisor._start_pumps

    def remember(proc):  # type: ignore[no-untyped-def]
        supervisor_pgid.append(proc.pid)
        threading.Thread(target=kill_when_ready, daemon=True).start()
        return original(proc)

    supervisor._start_pumps = remember  # type: ignore[method-assign]
    try:
        supervisor.run()
    finally:
        os.close(devnull)
    if not killed_at:
        raise SystemExit("the launcher never reported its ranks")
    return time.monotonic() - killed_at[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds per variant")
    ns = parser.parse_args()
    if not exitwatch.pidfd_available():
        raise SystemExit("pidfd_open is not available here: nothing to compare")
    with tempfile.TemporaryDirectory(prefix="resched-reap-") as tmp:
        script = Path(tmp) / "launcher.py"
        script.write_text(LAUNCHER)
        times: dict[bool, list[float]] = {True: [], False: []}
        for index in range(2 * ns.rounds):
            pidfd = index % 2 == 0
            times[pidfd].append(one_round(script, pidfd=pidfd))
    exitwatch._NO_PIDFD = False
    event, poll = (statistics.median(times[v]) for v in (True, False))
    print(f"kill -> supervisor returned, median of {ns.rounds} rounds each "
          f"(load {os.getloadavg()[0]:.1f}):")
    print(f"  exit events (pidfd): {event * 1000:7.1f} ms   max {max(times[True]) * 1000:.1f}")
    print(f"  polling (fallback):  {poll * 1000:7.1f} ms   max {max(times[False]) * 1000:.1f}")
    print(f"  ratio events / polling: {event / poll:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
