"""Run one attempt of the training command under supervision.

The command runs in its own session (so its process group id is its pid). Its stdout
and stderr are forwarded byte for byte, each chunk as soon as it is read, while the
same bytes are split into lines for the rule scanner and a bounded tail. The group is
stopped with the signal the wrapper received (or SIGTERM for a hang), given ``grace_s``
to exit, then SIGKILLed; after the direct child exits the group is swept the same way,
so a grandchild that ignores SIGTERM or outlives its parent does not survive, and the
wrapper (a child subreaper on Linux) reaps the orphans that land on it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wrapper.exitwatch import open_pidfd, wait_readable
from wrapper.hang import HangDetector, HangSettings
from wrapper.teardown import FinishSeen
from wrapper.linesink import LineSink, MarkGap, SkipLines
from wrapper.procgroup import (
    adopt_orphans,
    become_subreaper,
    forget_group,
    group_members,
    kill_group,
    stop_group,
    wait_group_gone,
)

# SIGHUP too: a closed terminal must not leave the command running without its wrapper.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


class SignalRelay:
    """Receives the wrapper's stop signals and forwards them to the supervised group.

    Installed once for the whole wrapper run (a preemption can arrive during a restore
    or a backoff, not only while the command runs). The first stop signal is remembered
    as ``requested``; every one reaches the group attached at that moment as
    ``stop_signum`` (``--stop-signal``, default SIGTERM), whatever arrived: Slurm's grace
    USR1 or a closed terminal's HUP would kill a training that only saves on SIGTERM
    (Megatron's exit-signal handler, NeMo's PreemptionCallback, torchrun's agent).
    """

    def __init__(self, stop_signum: int = signal.SIGTERM, *, broadcast: bool = False) -> None:
        self.stop_signum = stop_signum
        # Slurm signals every process of a job step: the training already got this very
        # signal, and a second one could hit it while it saves (RESCHED_STOP_BROADCAST).
        self.broadcast = broadcast
        self.requested: str | None = None
        self.requested_signum: int | None = None
        self._pgid: int | None = None
        self._previous: dict[int, object] = {}
        self._wakeup = threading.Event()

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers; an embedding caller forwards itself
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _handle(self, signum: int, _frame: object) -> None:
        if self.requested is None:
            self.requested = signal.Signals(signum).name
            self.requested_signum = signum
        self._wakeup.set()
        if self._pgid is not None and not (self.broadcast and signum == self.stop_signum):
            stop_group(self._pgid, self.stop_signum)

    def attach(self, pgid: int) -> None:
        self._pgid = pgid
        if self.requested_signum is not None:  # arrived between spawn and attach
            stop_group(pgid, self.stop_signum)

    def detach(self) -> None:
        self._pgid = None

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True as soon as a stop signal has arrived."""
        if self.requested is not None:
            return True
        self._wakeup.wait(max(0.0, seconds))
        return self.requested is not None


@dataclass(frozen=True)
class SupervisedRun:
    """How one attempt of the command ended."""

    exit_code: int | None  # None when the command died by a signal
    signal: int | None
    started_at: float  # time.time()
    ended_at: float
    wall_s: float
    hung: bool
    stop_signal: str | None
    launch_error: str | None  # set when the command could not be started
    stdout_tail: tuple[str, ...]
    stderr_tail: tuple[str, ...]
    leftover_processes_killed: int  # group members still alive after the child exited
    # Forwarded but not scanned (output bursts). None: bytes went by unseen (zero-copy
    # forwarding), so their lines could not be counted; unscanned_bytes is always exact.
    unscanned_lines: int | None = 0
    unscanned_bytes: int = 0
    # Where the time between the child's exit and the next attempt goes: when the exit
    # was seen (time.time()) and how long the sweep of the rest of the task took.
    exit_seen_at: float | None = None
    sweep_s: float | None = None
    # The training said it finished (this line) but did not exit: the wrapper ended it
    # after --teardown-timeout (wrapper.teardown). None: it exited by itself.
    teardown: str | None = None
    teardown_s: float | None = None  # from the finish line to the wrapper's stop


@dataclass(frozen=True)
class SuperviseOptions:
    grace_s: float = 30.0
    # A hung group cannot checkpoint (its ranks are stuck in a collective or stopped), so
    # it gets a short grace: the full preemption grace would only add dead time.
    hang_grace_s: float = 5.0
    hang: HangSettings = field(default_factory=HangSettings)
    heartbeat_file: Path | None = None
    poll_s: float = 0.05
    tail_lines: int = 200
    stdout_fd: int = 1
    stderr_fd: int = 2
    teardown_timeout_s: float | None = 30.0  # None: wait for the exit however long


_CENSUS_INTERVAL_S = 0.5  # how often the watch loop records the task's process tree
_SIGKILL_WAIT_S = 5.0  # SIGKILLed members are gone in milliseconds unless stuck in the kernel

FeedText = Callable[[str, str], object]  # (whole lines joined by "\n", stream name)
OnHang = Callable[[float, float], None]  # (silent_for_s, timeout_s)


class Supervisor:
    """Runs ``argv`` once; ``run()`` returns a :class:`SupervisedRun`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        options: SuperviseOptions,
        feed_text: FeedText,
        relay: SignalRelay,
        cwd: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_hang: OnHang | None = None,
        finished: Callable[[], FinishSeen | None] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.options = options
        self.relay = relay
        self.cwd = cwd
        self.clock = clock
        self.on_hang = on_hang
        self.finished = finished
        self._teardown: tuple[str, float] | None = None
        self._feed_lock = threading.Lock()
        self._feed_text = feed_text
        # A feed that can count skipped lines without scanning them keeps memory flat.
        self._skip_text: SkipLines | None = getattr(feed_text, "skip_lines", None)
        # A feed that can be told where line numbers restart lets bursts go zero-copy.
        self._gap_text: MarkGap | None = getattr(feed_text, "mark_gap", None)
        self.hang_detector: HangDetector | None = None
        self._sweep_grace_s = options.grace_s
        self._exit_seen_at: float | None = None

    def run(self) -> SupervisedRun:
        become_subreaper()
        started_wall, started = time.time(), self.clock()
        try:
            proc = subprocess.Popen(
                self.argv, env=self.env, cwd=self.cwd, start_new_session=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError, OSError) as error:
            return self._launch_failed(error, started_wall)
        # Taken before anything can reap the child, so it names this very process.
        child_fd = open_pidfd(proc.pid)
        adopt_orphans(proc.pid)
        self.relay.attach(proc.pid)
        sinks = self._start_pumps(proc)
        try:
            hung, stop_signal = self._watch(proc, started, sinks, child_fd)
        finally:
            # Reached on every path, an exception in the watch loop included.
            self.relay.detach()
            self._exit_seen_at = time.time()
            if child_fd is not None:
                os.close(child_fd)
            sweep_started = time.monotonic()
            leftovers = self._sweep_group(proc)
            sweep_s = time.monotonic() - sweep_started
            for sink in sinks:
                sink.join(timeout=5.0)
        ended_wall = time.time()
        code = proc.returncode
        return SupervisedRun(
            exit_code=code if code is not None and code >= 0 else None,
            signal=-code if code is not None and code < 0 else None,
            started_at=started_wall, ended_at=ended_wall,
            wall_s=round(self.clock() - started, 3), hung=hung, stop_signal=stop_signal,
            launch_error=None, stdout_tail=sinks[0].tail(), stderr_tail=sinks[1].tail(),
            leftover_processes_killed=leftovers,
            unscanned_lines=_sum_or_none(sinks[0].unscanned_line_count,
                                         sinks[1].unscanned_line_count),
            unscanned_bytes=sinks[0].unscanned_bytes + sinks[1].unscanned_bytes,
            exit_seen_at=self._exit_seen_at, sweep_s=round(sweep_s, 4),
            teardown=self._teardown[0] if self._teardown else None,
            teardown_s=round(self._teardown[1], 3) if self._teardown else None,
        )

    def _launch_failed(self, error: OSError, started_wall: float) -> SupervisedRun:
        command = self.argv[0] if self.argv else ""
        if isinstance(error, FileNotFoundError):
            code, message = EXIT_NOT_FOUND, f"command not found: {command}"
        else:
            code, message = EXIT_NOT_EXECUTABLE, f"cannot execute {command}: {error.strerror}"
        now = time.time()
        return SupervisedRun(
            exit_code=code, signal=None, started_at=started_wall, ended_at=now,
            wall_s=round(now - started_wall, 3), hung=False, stop_signal=self.relay.requested,
            launch_error=message, stdout_tail=(), stderr_tail=(message,),
            leftover_processes_killed=0,
        )

    def _start_pumps(self, proc: subprocess.Popen[bytes]) -> tuple[LineSink, LineSink]:
        assert proc.stdout is not None and proc.stderr is not None
        skip = self._skip if self._skip_text is not None else None
        gap = self._gap if self._gap_text is not None else None
        sinks = (
            LineSink("stdout", proc.stdout.fileno(), self.options.stdout_fd,
                     self._feed, self.options.tail_lines, skip, gap),
            LineSink("stderr", proc.stderr.fileno(), self.options.stderr_fd,
                     self._feed, self.options.tail_lines, skip, gap),
        )
        for sink in sinks:
            sink.start()
        return sinks

    def _skip(self, count: int, stream: str) -> None:
        with self._feed_lock:
            assert self._skip_text is not None
            self._skip_text(count, stream)

    def _gap(self, resume_at: int, stream: str) -> None:
        with self._feed_lock:
            assert self._gap_text is not None
            self._gap_text(resume_at, stream)

    def _feed(self, text: str, stream: str) -> None:
        # Both pumps feed the one scanner; it counts lines per stream and orders hits.
        with self._feed_lock:
            self._feed_text(text, stream)

    def _watch(
        self, proc: subprocess.Popen[bytes], started: float, sinks: tuple[LineSink, LineSink],
        child_fd: int | None = None,
    ) -> tuple[bool, str | None]:
        """Wait for the child; stop the group on a hang or a stop signal. Returns (hung, signal).

        ``poll_s`` paces the hang and heartbeat checks only: the child's exit wakes the
        loop at once through its pidfd (``child_fd``; without one, Popen.wait polls)."""
        options = self.options
        detector = HangDetector(options.hang, started_at=started)
        self.hang_detector = detector
        heartbeat_mtime = _mtime_ns(options.heartbeat_file)
        forwarded = 0  # output progress: bytes, which a zero-copy burst advances too
        hung, stop_signal = False, None
        kill_deadline: float | None = None
        next_census = 0.0
        while proc.poll() is None:
            now = self.clock()
            if now >= next_census:
                # Remember the task's processes (ranks in sessions of their own too), so
                # they are still found and killed after their launcher has died.
                group_members(proc.pid)
                next_census = now + _CENSUS_INTERVAL_S
            mtime = _mtime_ns(options.heartbeat_file)
            if mtime != heartbeat_mtime:
                heartbeat_mtime = mtime
                detector.observe_heartbeat(now)
            now_forwarded = sinks[0].bytes_forwarded + sinks[1].bytes_forwarded
            if now_forwarded != forwarded:
                forwarded = now_forwarded
                detector.observe_output(now)
            if kill_deadline is None and self.relay.requested is not None:
                stop_signal = self.relay.requested  # already forwarded by the relay
                kill_deadline = now + options.grace_s
            elif kill_deadline is None and self._torn_down(now, detector):
                stop_group(proc.pid, signal.SIGTERM)  # nothing left to save: a short grace
                kill_deadline = now + min(options.grace_s, options.hang_grace_s)
            elif kill_deadline is None and detector.expired(now):
                hung = True
                if self.on_hang is not None:
                    self.on_hang(detector.silent_for(now), detector.timeout_s() or 0.0)
                stop_group(proc.pid, signal.SIGTERM)
                kill_deadline = now + min(options.grace_s, options.hang_grace_s)
            elif kill_deadline is not None and now >= kill_deadline:
                kill_group(proc.pid, signal.SIGKILL)
            if kill_deadline is not None:
                # A stopping group keeps only what is left of its grace for the sweep.
                self._sweep_grace_s = max(0.0, kill_deadline - now)
            if child_fd is not None:
                wait_readable((child_fd,), options.poll_s)
                continue
            try:
                proc.wait(timeout=options.poll_s)
            except subprocess.TimeoutExpired:
                pass
        # The forwarded signal may end the child before the loop saw the request.
        return hung, stop_signal or self.relay.requested

    def _torn_down(self, now: float, detector: HangDetector) -> bool:
        """The training said it finished and has been quiet since for the teardown
        timeout (or long enough for the hang detector): end it as complete."""
        timeout = self.options.teardown_timeout_s
        said = self.finished() if self.finished is not None and timeout is not None else None
        if said is None or timeout is None:
            return False
        since = now - said.at
        quiet = min(since, detector.silent_for(now))
        if quiet < timeout and not detector.expired(now):
            return False
        self._teardown = (said.evidence, since)
        return True

    def _sweep_group(self, proc: subprocess.Popen[bytes]) -> int:
        """Kill and reap whatever is left of the group; return how many were left.

        Members get SIGTERM (and SIGCONT) and what is left of the grace, then SIGKILL;
        each wait ends the moment the last member is reaped (exits wake it, see
        ``wait_group_gone``), so the next attempt never waits on a timer here.
        """
        if proc.poll() is None:  # an exception interrupted the watch: the child still runs
            kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
        pgid = proc.pid
        leftovers = group_members(pgid)
        if not leftovers:
            forget_group(pgid)
            return 0
        stop_group(pgid, signal.SIGTERM)
        if not wait_group_gone(pgid, self._sweep_grace_s):
            # SIGKILL cannot be ignored; re-sent each round for children forked by a
            # member as it died. Bounded anyway: an unkillable (D state) process must
            # not keep the wrapper from reporting.
            wait_group_gone(pgid, _SIGKILL_WAIT_S,
                            each_round=lambda: kill_group(pgid, signal.SIGKILL))
        forget_group(pgid)
        return len(leftovers)


def _sum_or_none(first: int | None, second: int | None) -> int | None:
    return None if first is None or second is None else first + second


def _mtime_ns(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
