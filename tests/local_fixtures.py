"""Helpers for the local executor's end-to-end tests: run ``resched run`` for real."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESCHED = str(Path(sys.executable).parent / "resched")
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class LocalRun:
    returncode: int
    stdout: str
    stderr: str
    report: dict[str, Any]
    workdir: Path

    def attempts(self, task: str) -> list[dict[str, Any]]:
        return [a for a in self.report["attempts"] if a["task"] == task]

    def events(self, kind: str, task: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.report["events"] if e["kind"] == kind and (task is None or e["task"] == task)]

    def log(self, task: str, pod: int = 0, attempt: int = 1) -> str:
        return (self.workdir / "tasks" / task / f"pod-{pod}" / f"run-{attempt}.log").read_text()


def write_workflow(directory: Path, text: str, name: str = "wf.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def clean_env() -> dict[str, str]:
    """This environment without RESCHED_ settings: a test says what it wants."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RESCHED_")}


def run_local(spec: Path, *args: str, workdir: Path, timeout: float = 240,
              path_prefix: Path | None = None) -> LocalRun:
    """``resched run SPEC ARGS`` in a subprocess, with the report read back."""
    report = workdir.parent / f"{workdir.name}-report.json"
    argv = [RESCHED, "run", str(spec), "--workdir", str(workdir), "--report", str(report),
            "--progress", "plain", *args]
    env = clean_env()
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=spec.parent, check=False)
    data = json.loads(report.read_text()) if report.exists() else {}
    return LocalRun(done.returncode, done.stdout, done.stderr, data, workdir)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (each socket held until all are picked)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def processes_with(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (orphan checks)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def processes_with_env(text: str) -> list[int]:
    """Live processes whose environment contains ``text`` (every task process inherits
    ``RESCHED_OUTCOME_FILE=<workdir>/...``, so this finds a run's orphans wherever they are)."""
    found = []
    needle = text.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


# A tiny "training" for semantics tests: counts steps, keeps a checkpoint in /tmp/models
# (files + completion marker), resumes from the staged input, and exits 3 once at
# --fail-at (the once-file lives in the task's output folder, which outlives pods).
COUNTER_TRAIN = '''
import shutil, sys, time
from pathlib import Path
from wrapper.checkpoint.marker import mark_complete, read_marker

staged, steps, fail_at, once = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
models = Path("/tmp/models")
models.mkdir(parents=True, exist_ok=True)
start = 0
if staged and read_marker(staged) is not None:
    shutil.copytree(staged, models, dirs_exist_ok=True)
    start = read_marker(models)
print(f"resched-train: resumed from step {start}", flush=True)
for step in range(start + 1, steps + 1):
    time.sleep(0.05)
    (models / "state.txt").write_text(str(step))
    mark_complete(models, step)
    print(f"resched-train: step {step} loss 0", flush=True)
    if step == fail_at and not once.exists():
        once.touch()
        sys.exit(3)
'''
