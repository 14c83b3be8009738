"""One run of a task's command in its pod: start, stream output, checkpoint timers, stop.

A "pod" (OSMO's task attempt, ``retry_id``) is a folder with the task's private
``/tmp``; it lives until the task is rescheduled. A sibling restarted in place runs its
command again in the same pod (same ``/tmp``, no new download of inputs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from workflows.backends import taskfs
from workflows.backends.local import proctree
from workflows.backends.local.ckpt_progress import CheckpointProgress
from workflows.backends.local.inject import EXIT_DIR_ENV
from workflows.backends.local.plan import PlannedCheckpoint, PlannedTask
from workflows.backends.local.timeline import Timeline, parse_line
from workflows.errors import BackendError
from workflows.osmo_runtime import CheckpointSchedule



@dataclass(frozen=True)
class RunContext:
    """What every run of a task needs from the executor."""

    timeline: Timeline
    view_mode: str
    keep: tuple[Path, ...]
    hook_dir: Path | None
    on_output: Callable[[str, str], None] = lambda task, line: None


class CheckpointTimer:
    """OSMO's timer: publish one period after start, then every period, and once at stop."""

    def __init__(self, entry: PlannedCheckpoint, local_dir: Path, task: str, timeline: Timeline,
                 *, sleep_event: threading.Event | None = None) -> None:
        self.entry, self.local_dir, self.task, self.timeline = entry, local_dir, task, timeline
        self._stop = sleep_event or threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"ckpt-{task}", daemon=True)
        self._lock = threading.Lock()  # one upload at a time (the final one waits)
        self._warned: set[str] = set()

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        # OSMO's schedule (osmo_runtime.CheckpointSchedule): one period after start, then
        # one period after the previous upload ENDED; the final upload runs in stop().
        schedule = CheckpointSchedule(self.entry.frequency_s)
        due = schedule.first_due(time.monotonic())
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            self.upload(final=False)
            due = schedule.next_due(time.monotonic())

    def stop(self) -> None:
        """Stop the timer and run the final upload (the command has exited)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.upload(final=True)

    def upload(self, *, final: bool) -> None:
        """One upload with OSMO's semantics (wrapper.checkpoint.osmo_upload): whatever the
        task writes, marker or not; the final one uploads what is there."""
        from wrapper.checkpoint.layouts import inspect_layout
        from wrapper.checkpoint.osmo_upload import UploadKind, upload_checkpoint

        with self._lock:
            for warning in inspect_layout(self.local_dir).warnings:
                if warning not in self._warned:
                    self._warned.add(warning)
                    self.timeline.add("checkpoint_warning", self.task, warning=warning)
            outcome = upload_checkpoint(self.local_dir, self.entry.upload_url, final=final,
                                        regex=self.entry.regex)
            if outcome.kind is UploadKind.UPLOADED:
                assert outcome.result is not None
                self.timeline.add(
                    "checkpoint_uploaded", self.task, final=final, step=outcome.result.step,
                    changed=outcome.result.changed, seconds=round(outcome.seconds, 4),
                    url=self.entry.upload_url, files=outcome.result.files,
                )
            elif outcome.kind is UploadKind.SKIPPED:
                reason = outcome.reason.replace(str(self.local_dir), self.entry.path)
                self.timeline.add("checkpoint_upload_skipped", self.task, final=final,
                                  reason=reason)
            else:
                self.timeline.add("checkpoint_upload_failed", self.task, final=final,
                                  error=outcome.reason)


@dataclass
class TaskRun:
    """One started command of ``task`` (``attempt`` counts runs of this task, from 1)."""

    task: PlannedTask
    retry_id: int
    attempt: int
    pod_dir: Path
    popen: subprocess.Popen[bytes]
    token: str
    started_mono: float
    outcome_file: Path
    exit_dir: Path | None
    log_path: Path
    timers: list[CheckpointTimer] = field(default_factory=list)
    ckpt_progress: CheckpointProgress | None = None
    readers: list[threading.Thread] = field(default_factory=list)
    forced_exit_code: int | None = None
    kill_at: float | None = None  # monotonic deadline set by a term fault
    log: IO[bytes] | None = None
    stopped_by_executor: bool = False
    finished: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def exit_code(self) -> int:
        """Kubernetes-style: a signal N is reported as 128 + N."""
        if self.forced_exit_code is not None:
            return self.forced_exit_code
        code = self.popen.returncode
        assert code is not None
        return 128 - code if code < 0 else code

    def stop(self, grace_s: float) -> None:
        self.stopped_by_executor = True
        proctree.stop_task(self.popen.pid, self.token, is_done=lambda: self.poll() is not None,
                           grace_s=grace_s)
        self.popen.wait()

    def finish(self) -> dict[str, Any] | None:
        """After the command exited: kill leftovers, final uploads, drain output, read outcome."""
        if self.finished:
            return self.outcome()
        self.finished = True
        proctree.kill_all(self.popen.pid, self.token)
        if self.ckpt_progress is not None:
            self.ckpt_progress.stop()  # before the final upload names the last step
        for timer in self.timers:
            timer.stop()
        for reader in self.readers:
            reader.join(timeout=5)
        if self.log is not None:
            self.log.close()
        return self.outcome()

    def outcome(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.outcome_file.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None


def start_run(task: PlannedTask, retry_id: int, attempt: int, pod_dir: Path, ctx: RunContext) -> TaskRun:
    """Materialize files, start the command in the task's view, start its timers."""
    files = list(task.files)
    argv = list(task.argv)
    env_task = dict(task.environment)
    if ctx.view_mode == "rewrite":
        files = [taskfs.TaskFile(f.path, taskfs.rewrite_tmp(f.data.decode(errors="surrogateescape"),
                 pod_dir, ctx.keep).encode(errors="surrogateescape"), f.mode) for f in files]
        argv = [taskfs.rewrite_tmp(a, pod_dir, ctx.keep) for a in argv]
        env_task = {k: taskfs.rewrite_tmp(v, pod_dir, ctx.keep) for k, v in env_task.items()}
    taskfs.materialize(pod_dir, files)
    token = uuid.uuid4().hex
    outcome_file = pod_dir / f"outcome-{attempt}.json"
    outcome_file.unlink(missing_ok=True)
    env = _environment(task, env_task, retry_id, token, outcome_file)
    exit_dir = None
    if ctx.hook_dir is not None:
        exit_dir = pod_dir / f"chaos-{attempt}"
        (exit_dir / "pids").mkdir(parents=True, exist_ok=True)
        env[EXIT_DIR_ENV] = str(exit_dir)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ctx.hook_dir), env.get("PYTHONPATH")) if p)
    log_path = pod_dir / f"run-{attempt}.log"
    try:
        popen = taskfs.run_in_task_view(argv, pod_dir, files, env, mode=ctx.view_mode, keep=ctx.keep)
    except OSError as error:
        raise BackendError(f"task {task.name}: cannot start {argv[0]!r}: {error.strerror}",
                           fix="install the command or fix the task's command:") from None
    run = TaskRun(task=task, retry_id=retry_id, attempt=attempt, pod_dir=pod_dir, popen=popen,
                  token=token, started_mono=time.monotonic(), outcome_file=outcome_file,
                  exit_dir=exit_dir, log_path=log_path)
    ctx.timeline.add("task_started", task.name, attempt=attempt, retry_id=retry_id, pid=popen.pid,
                     log=str(log_path))
    folders = [taskfs.host_path(entry.path, pod_dir) if ctx.view_mode != "rewrite" else Path(
        taskfs.rewrite_tmp(entry.path, pod_dir)) for entry in task.checkpoints]
    if folders:
        staged = [e.fields["step"] for e in ctx.timeline.events if e.kind == "inputs_staged"
                  and e.task == task.name and e.fields.get("retry_id") == retry_id
                  and isinstance(e.fields.get("step"), int)]
        run.ckpt_progress = CheckpointProgress(task.name, attempt, folders, ctx.timeline,
                                               restored=max(staged, default=None))
        run.ckpt_progress.start()
    log = run.log = log_path.open("ab")
    lock = threading.Lock()
    for stream, name in ((popen.stdout, "stdout"), (popen.stderr, "stderr")):
        assert stream is not None
        reader = threading.Thread(target=_read_lines, args=(stream, name, run, log, lock, ctx),
                                  daemon=True, name=f"{task.name}-{name}")
        reader.start()
        run.readers.append(reader)
    for entry, local in zip(task.checkpoints, folders, strict=True):
        timer = CheckpointTimer(entry, local, task.name, ctx.timeline)
        timer.start()
        run.timers.append(timer)
    return run


def _environment(task: PlannedTask, env_task: dict[str, str], retry_id: int, token: str,
                 outcome_file: Path) -> dict[str, str]:
    # A pod does not inherit the submitting shell's resched settings (OSMO's don't either).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESCHED_")}
    bin_dir = str(Path(sys.executable).parent)  # resched, torchrun, python of this install
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "/usr/bin:/bin")])
    env["PYTHONUNBUFFERED"] = "1"  # step lines reach the timeline when they happen
    env.update(env_task)
    env[proctree.TOKEN_ENV] = token
    env["RESCHED_OUTCOME_FILE"] = str(outcome_file)
    if "RESCHED_NODE" not in env_task:
        env["RESCHED_NODE"] = node_name(task, retry_id)
    return env


def node_name(task: PlannedTask, retry_id: int) -> str:
    """The emulated node a pod of ``task`` runs on. A reschedule lands on "another node":
    node names differ per pod, as on a cluster (unless the task sets RESCHED_NODE itself)."""
    return dict(task.environment).get("RESCHED_NODE") or f"local-{task.name}-{retry_id}"


# A line with no end (a progress bar left open, a binary blob) is parsed once it is this long.
_MAX_PENDING = 1 << 20


def _read_lines(stream: IO[bytes], name: str, run: TaskRun, log: IO[bytes], lock: threading.Lock,
                ctx: RunContext) -> None:
    """Copy the output to the log and read it as lines ended by ``\n`` or ``\r``: a
    progress bar redraws with ``\r`` and ends its line only when it closes, so reading
    whole ``\n`` lines would see a training's steps only at its end."""
    pending = b""
    read = getattr(stream, "read1", stream.read)
    resumed_step = run.ckpt_progress.current if run.ckpt_progress is not None else None
    try:
        for chunk in iter(lambda: read(65536), b""):
            with lock:
                log.write(chunk)
                log.flush()
            pending += chunk
            cut = max(pending.rfind(b"\n"), pending.rfind(b"\r"))
            if cut < 0 and len(pending) < _MAX_PENDING:
                continue
            done, pending = (pending, b"") if cut < 0 else (pending[:cut + 1], pending[cut + 1:])
            for raw in done.splitlines(keepends=True):
                _one_line(raw, run, ctx, resumed_step)
        if pending:
            _one_line(pending, run, ctx, resumed_step)
    finally:
        stream.close()


def _one_line(raw: bytes, run: TaskRun, ctx: RunContext,
              resumed_step: Callable[[], int | None] | None) -> None:
    line = raw.decode(errors="replace")
    parse_line(line, run.task.name, ctx.timeline, attempt=run.attempt, resumed_step=resumed_step)
    ctx.on_output(run.task.name, line.rstrip("\r\n"))
