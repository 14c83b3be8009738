"""Helpers for the example-training tests: start examples/ddp_train.py under real torchruns.

Every torchrun is started in its own session; teardown SIGKILLs what is left by pid
(the launcher's group, then its workers, which torchrun starts in sessions of their own).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from session_shared import session_lock

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "ddp_train.py"
CHECKSUM_RE = re.compile(r"^resched-train: final checksum ([0-9a-f]{64})$", re.MULTILINE)
RESUMED_RE = re.compile(r"^resched-train: resumed from step (\d+)$", re.MULTILINE)
STEP_RE = re.compile(r"^resched-train: step (\d+) loss ", re.MULTILINE)
CHECKPOINT_RE = re.compile(r"^resched-train: checkpoint step (\d+) save_s ", re.MULTILINE)
# One configuration for every bit-exactness comparison in these tests.
STEPS = 24
CHECKPOINT_EVERY = 5
TRAIN_ARGS = ("--steps", str(STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY))
WAIT_S = 120.0  # liveness bound only; nothing asserts how fast anything is


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_pids(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def kill_launcher(proc: subprocess.Popen[bytes], workers: list[int] | None = None) -> None:
    """SIGKILL a launcher's process group and, by pid, the workers it started (torchrun
    starts each in a session of its own, out of reach of the group kill)."""
    if workers is None:
        workers = child_pids(proc.pid)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    for pid in workers:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass
class TrainRun:
    """One torchrun process (its own session) writing stdout+stderr to ``log``."""

    proc: subprocess.Popen[bytes]
    log: Path
    workers: list[int] = field(default_factory=list)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = WAIT_S) -> re.Match[str]:
        regex = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = regex.search(self.text())
            if found:
                return found
            if self.proc.poll() is not None:
                found = regex.search(self.text())
                if found:
                    return found
                raise AssertionError(f"exited {self.proc.returncode} before /{pattern}/:\n"
                                     + self.text()[-4000:])
            time.sleep(0.02)
        raise AssertionError(f"no /{pattern}/ within {timeout} s:\n" + self.text()[-4000:])

    def wait(self, timeout: float = WAIT_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("torchrun did not exit:\n" + self.text()[-4000:]) from None

    def note_workers(self) -> list[int]:
        self.workers = child_pids(self.proc.pid)
        return self.workers

    def kill(self) -> None:
        if not self.workers:
            self.note_workers()
        kill_launcher(self.proc, self.workers)

    def checksum(self) -> str:
        found = CHECKSUM_RE.search(self.text())
        assert found, "no final checksum line:\n" + self.text()[-4000:]
        return found.group(1)


class Launcher:
    """Starts torchruns of the example and cleans up every one of them."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.runs: list[TrainRun] = []

    def start(self, checkpoint_dir: Path, *args: str, nnodes: int = 1, node_rank: int = 0,
              port: int | None = None, env: dict[str, str] | None = None,
              name: str = "run") -> TrainRun:
        launch = (["--standalone", "--nproc-per-node", "2"] if nnodes == 1 else
                  ["--nnodes", str(nnodes), "--nproc-per-node", "1", "--node-rank",
                   str(node_rank), "--master-addr", "127.0.0.1", "--master-port", str(port)])
        argv = [sys.executable, "-m", "torch.distributed.run", *launch, str(SCRIPT),
                "--checkpoint-dir", str(checkpoint_dir), *args]
        log = self.workdir / f"{name}-{len(self.runs)}.log"
        with open(log, "wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                    cwd=self.workdir, env={**os.environ, **(env or {})},
                                    start_new_session=True)
        run = TrainRun(proc, log)
        self.runs.append(run)
        return run

    def run(self, checkpoint_dir: Path, *args: str, **kwargs: object) -> TrainRun:
        started = self.start(checkpoint_dir, *args, **kwargs)  # type: ignore[arg-type]
        started.wait()
        return started

    def close(self) -> None:
        for run in self.runs:
            run.kill()


@pytest.fixture(name="launcher")
def launcher_fixture(tmp_path: Path) -> Iterator[Launcher]:
    started = Launcher(tmp_path)
    yield started
    started.close()


@dataclass(frozen=True)
class FinishedRun:
    """The log of a torchrun that has exited (the shared reference run)."""

    log: Path
    returncode: int

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def checksum(self) -> str:
        found = CHECKSUM_RE.search(self.text())
        assert found, "no final checksum line:\n" + self.text()[-4000:]
        return found.group(1)


@pytest.fixture(name="reference_run", scope="session")
def reference_run_fixture(tmp_path_factory: pytest.TempPathFactory) -> tuple[FinishedRun, Path]:
    """A fault-free 2-rank run of the shared configuration: its log and checkpoint dir.

    Run once per test session, not once per pytest-xdist worker: the first worker that
    needs it runs it in the folder the session's workers share, the others wait for it
    on a lock and read the same log and checkpoint (the tests only read them)."""
    with session_lock(tmp_path_factory, "reference-run") as root:
        workdir, outcome = root / "reference-run", root / "reference-run.returncode"
        if not outcome.exists():
            workdir.mkdir()
            started, code = Launcher(workdir), -1  # -1: it never exited (wait raised)
            try:
                code = started.run(workdir / "ckpt", *TRAIN_ARGS).proc.returncode
            finally:
                started.close()
                outcome.write_text(str(code))  # a failed run fails every worker alike
    run = FinishedRun(workdir / "run-0.log", int(outcome.read_text()))
    assert run.returncode == 0, run.text()[-4000:]
    return run, workdir / "ckpt"


def steps_of(pattern: re.Pattern[str], text: str) -> list[int]:
    return [int(m) for m in pattern.findall(text)]


def checkpoint_files(directory: Path) -> Sequence[str]:
    return sorted(p.name for p in directory.glob("ckpt-*.pt"))
