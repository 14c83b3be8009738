"""Carry out one chaos fault on a running task (see :mod:`.chaos` for what each kind means)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workflows.backends.local import proctree
from workflows.backends.local.chaos import Fault

EXIT_DIR_ENV = "RESCHED_CHAOS_EXIT_DIR"

# Preloaded (via PYTHONPATH) into the task's Python processes in chaos runs with exit
# faults only. It registers the process and, on SIGUSR2, exits with the code the
# executor wrote: a real rank exit, seen by the launcher and the wrapper as such.
HOOK_SOURCE = '''"""resched chaos hook: exit with a chosen code on SIGUSR2 (resched run --chaos exit:...)."""
import os as _os
import signal as _signal

_dir = _os.environ.get("RESCHED_CHAOS_EXIT_DIR")


def _exit_with_code(signum, frame):
    try:
        with open(_os.path.join(_dir, "code")) as _f:
            _code = int(_f.read().strip())
    except (OSError, ValueError):
        return
    _os._exit(_code)


if _dir:
    try:
        _signal.signal(_signal.SIGUSR2, _exit_with_code)
        _os.makedirs(_os.path.join(_dir, "pids"), exist_ok=True)
        open(_os.path.join(_dir, "pids", str(_os.getpid())), "w").close()
    except (OSError, ValueError):
        pass
'''


@dataclass(frozen=True)
class Injection:
    """What was done; ``forced_exit_code`` is reported as the task's exit when set."""

    description: str
    pids: tuple[int, ...]
    forced_exit_code: int | None = None
    kill_after_grace: bool = False


def install_hook(directory: Path) -> Path:
    """Write the hook module; put the returned folder first on the task's PYTHONPATH."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(HOOK_SOURCE)
    return directory


def _hooked(exit_dir: Path | None, candidates: list[proctree.Proc]) -> list[proctree.Proc]:
    if exit_dir is None:
        return []
    registered = {int(p.name) for p in (exit_dir / "pids").glob("*") if p.name.isdigit()}
    return [p for p in candidates if p.pid in registered]


def _is_launcher(proc: proctree.Proc) -> bool:
    names = ("torchrun", "ft_launcher", "torch.distributed.run")
    return any(os.path.basename(arg) in names for arg in proc.argv[:3])


def inject(fault: Fault, *, token: str, top_pid: int, exit_dir: Path | None) -> Injection | None:
    """Inject ``fault``; None when the task has nothing to hit yet (try again later)."""
    procs = proctree.task_processes(token)
    if top_pid not in procs:
        return None
    wrapper, below = proctree.workload(procs, top_pid)
    where = "under resched wrap" if wrapper is not None else "of the task"
    if fault.kind == "podkill":
        pids = sorted(procs)
        proctree.send(pids, signal.SIGKILL)
        return Injection(f"SIGKILL to all {len(pids)} processes of the task", tuple(pids))
    if fault.kind == "term":
        os.kill(top_pid, signal.SIGTERM)
        return Injection(f"SIGTERM to the task's top process {top_pid} (preemption)",
                         (top_pid,), kill_after_grace=True)
    if not below:
        return None
    if fault.kind == "kill":
        pids = sorted(p.pid for p in below)
        proctree.send(pids, signal.SIGKILL)
        return Injection(f"SIGKILL to {len(pids)} processes {where}", tuple(pids))
    if fault.kind == "slow":
        start_throttle(token, top_pid, fault.factor or 2.0)
        return Injection(f"{len(below)} processes {where} slowed {fault.factor:g}x "
                         "(SIGSTOP/SIGCONT duty cycle) until they exit",
                         tuple(sorted(p.pid for p in below)))
    if fault.kind == "hang":
        pids = sorted(p.pid for p in proctree.leaves(below))
        proctree.send(pids, signal.SIGSTOP)
        return Injection(f"SIGSTOP to {len(pids)} leaf processes {where}", tuple(pids))
    return _inject_exit(fault, procs, below, exit_dir, where)


def _inject_exit(
    fault: Fault,
    procs: dict[int, proctree.Proc],
    below: list[proctree.Proc],
    exit_dir: Path | None,
    where: str,
) -> Injection | None:
    code = fault.code or 1
    # A launcher that has not spawned its ranks yet is a leaf too: wait for the ranks.
    targets = [p for p in _hooked(exit_dir, proctree.leaves(below)) if not _is_launcher(p)]
    if targets and exit_dir is not None:
        target = min(targets, key=lambda p: p.pid)
        (exit_dir / "code").write_text(str(code))
        os.kill(target.pid, signal.SIGUSR2)
        return Injection(f"process {target.pid} {where} made to exit {code}", (target.pid,))
    if _hooked(exit_dir, list(procs.values())):
        return None  # hooked Python is up but its ranks are not yet: try again shortly
    pids = sorted(procs)
    proctree.send(pids, signal.SIGKILL)
    return Injection(f"no Python rank to exit: task killed, exit {code} reported "
                     "(the wrapper's decision is bypassed)", tuple(pids), forced_exit_code=code)


MIN_SHARE = 0.5  # at most 2x more pause for load: a loaded machine still progresses
WINDOW_S = 0.001  # how long the slowed workload runs between two pauses (see Throttle)


def cpu_share(cpus: int, loadavg: str) -> float:
    """The share of one CPU that a runnable process gets now: CPUs / runnable tasks, from
    /proc/loadavg's "running/total" field (read by the throttle while its workload is
    stopped: the reading thread itself stands in for the peer it is compared with)."""
    try:
        running = int(loadavg.split()[3].split("/")[0])
    except (IndexError, ValueError):
        return 1.0
    return max(MIN_SHARE, min(1.0, cpus / max(1, running)))


def _read_loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text()
    except OSError:
        return ""


def start_throttle(token: str, top_pid: int, factor: float) -> subprocess.Popen[bytes]:
    """Run a :class:`Throttle` in a process of its own (``python -m
    workflows.backends.local.throttle``); it ends with the workload, or with this process
    (it checks its parent), and always leaves the workload running. A thread reaps it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "workflows.backends.local.throttle", token, str(top_pid),
         repr(float(factor)), str(os.getpid())],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True)
    threading.Thread(target=proc.wait, name=f"chaos-slow-{top_pid}", daemon=True).start()
    return proc


def _wake_on_time() -> None:
    """Best effort: wake on time on a loaded machine. A late stop lets the workload run
    many steps at full speed, then pause long: the pauses keep the factor on average, but
    most steps are fast and NVRx's medians miss the slowdown (seen at load 4-9 on two
    cores: whole reports scored the slowed rank 0.96-1.0, and the run was never flagged).

    A real-time class for this thread first (SCHED_FIFO at the lowest priority: it wakes
    the moment its timer fires, before any normal process; it sleeps between two
    signals, so it takes almost no CPU, and the kernel's RT throttling caps it anyway),
    else a nicer value; both need CAP_SYS_NICE. Measured on the 2-core VM at load 3.5,
    a workload of 2.3 ms steps: run windows p90 1.05 ms with SCHED_FIFO against 2.4-4.5
    ms at nice -10, whose median step was once not slowed at all (2.30 ms, as unslowed)."""
    tid = threading.get_native_id()
    try:
        # (SCHED_RESET_ON_FORK: nothing it might ever start inherits the class)
        policy = os.SCHED_FIFO | getattr(os, "SCHED_RESET_ON_FORK", 0)
        os.sched_setscheduler(tid, policy, os.sched_param(os.sched_get_priority_min(os.SCHED_FIFO)))
        return
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, tid, -10)
    except (OSError, AttributeError):
        pass  # not permitted: the throttle still works, less precisely under load


class Throttle:
    """Runs a task's workload FACTOR times slower than its peers (a throttled GPU, a slow
    node): it runs for WINDOW_S, then is stopped (SIGSTOP) for FACTOR - 1 times as long (or more, see below) and continued. The
    process list is read again every ``refresh_s``, so ranks a launcher restarts are
    slowed too; it ends when the attempt's processes are gone, and always leaves them
    running.

    How long the pause is, and why (measured with NVRx's relative scores, see
    docs/wrapper.md "A straggler stop end to end"):
    - it follows how long the workload really ran: on a loaded machine this thread wakes
      late, and a fixed pause gave a much smaller factor than asked;
    - it grows with the machine's load: a process continued after a pause is scheduled at
      once (the kernel credits the time it did not run), so it ran its window at full
      speed while its unslowed peers shared the CPUs with everything else. A pause of
      ran x (FACTOR / share - 1), share = the CPU share a runnable peer gets now, keeps
      it FACTOR times slower than a peer (it was ~3x for a requested 8 at load 7 on two
      cores without this);
    - the process scan (~2 ms) is done while the workload is stopped, not every period;
    - the workload runs WINDOW_S at a time, shorter than a step, so that every step holds
      a pause: NVRx compares median step times, and steps that fit between two pauses
      are not slowed at all;
    - every process below the wrapper but the launchers is stopped, not only the leaves:
      a rank with a child of its own (a data loader worker, a multiprocessing resource
      tracker) is no leaf, and a leaves-only throttle would slow the child and leave
      the rank at full speed (a slow node slows all of it).
    It runs in a process of its own (:func:`start_throttle`): a thread of the executor
    waits for the GIL behind uploads and log readers (a 5 ms switch interval against a
    1 ms window). Measured there at load 9.4 on the 2-core VM: run windows p50 1.08 ms,
    p90 3.9 ms.
    """

    def __init__(self, token: str, top_pid: int, factor: float, window_s: float = WINDOW_S,
                 refresh_s: float = 0.25, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 load: Callable[[], str] = _read_loadavg, cpus: int | None = None) -> None:
        self.token, self.top_pid, self.factor, self.window_s = token, top_pid, factor, window_s
        self.refresh_s, self.clock, self.sleep, self.load = refresh_s, clock, sleep, load
        self.cpus = cpus or len(os.sched_getaffinity(0))
        self.share = 1.0  # smoothed: one sample of the run queue is noisy

    def _targets(self) -> list[int] | None:
        procs = proctree.task_processes(self.token)
        if self.top_pid not in procs:
            return None
        _wrapper, below = proctree.workload(procs, self.top_pid)
        return sorted(p.pid for p in below if not _is_launcher(p))

    def _sleep_until(self, deadline: float) -> None:
        left = deadline - self.clock()
        if left > 0:
            self.sleep(left)

    def pause_s(self, ran_s: float) -> float:
        """How long to stop the workload after it ran ``ran_s`` (updates the share)."""
        self.share = 0.8 * self.share + 0.2 * cpu_share(self.cpus, self.load())
        return ran_s * (self.factor / self.share - 1.0)

    def run(self) -> None:
        _wake_on_time()
        running = self.window_s
        targets = self._targets()
        refreshed = self.clock()
        while targets is not None:
            started = self.clock()
            self._sleep_until(started + running)
            stopped = targets
            proctree.send(stopped, signal.SIGSTOP)
            resume_at = self.clock() + self.pause_s(self.clock() - started)
            try:
                if self.clock() - refreshed >= self.refresh_s:  # scan while they are stopped
                    targets, refreshed = self._targets(), self.clock()
                self._sleep_until(resume_at)
            finally:
                proctree.send(stopped, signal.SIGCONT)
