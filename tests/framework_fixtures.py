"""Real framework trainings under `resched wrap`, with faults at precise points.

The trainings (tests/framework_trainings/*.py) hold only their framework's own
checkpointing. Faults come from tests/framework_trainings/faulthook/sitecustomize.py,
put on PYTHONPATH for the faulty run only (see its docstring): the training scripts are
never edited for a fault.

Two shapes of run:
- in place: one `resched wrap` on one directory; the fault is retried in place;
- new pod: the first `resched wrap` owns a store (`--checkpoint-url`), the fault ends it
  with the reschedule code (a stop, or no in-place retry left), and a second `resched
  wrap` on a fresh, empty directory restores from the store, as a rescheduled task does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.supervise_fixtures import REPO, child_env


# The whole matrix (every fault x every framework) takes ~4 min of the suite's 10 on two
# cores: a representative case per framework always runs, the rest on demand.
def needs(module: str) -> pytest.MarkDecorator:
    """Skip when ``module`` is not installed, without importing it: the trainings run in
    subprocesses, and importing Lightning / DeepSpeed / Megatron-Core at collection cost
    every pytest-xdist worker seconds of CPU (pytest.importorskip imports)."""
    try:
        absent = importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        absent = True
    return pytest.mark.skipif(absent, reason=f"{module} is not installed")


MATRIX_ENV = "RESCHED_FRAMEWORK_MATRIX"
MATRIX = [pytest.mark.slow, pytest.mark.skipif(
    os.environ.get(MATRIX_ENV) != "1",
    reason=f"part of the full framework fault matrix: set {MATRIX_ENV}=1 to run it")]

TRAININGS = Path(__file__).parent / "framework_trainings"
FAULTHOOK = TRAININGS / "faulthook"
RESCHEDULE = 3  # resched wrap's default --reschedule-code


@dataclass(frozen=True)
class Fault:
    """FAULT_SPEC for the hook, and whether the run moves to a new pod after it."""

    name: str
    spec: str
    new_pod: bool
    count: int = 1


@dataclass(frozen=True)
class Outcome:
    output: str  # every stdout + stderr line of every `resched wrap` run
    records: list[dict]  # the attempts' records (the last pod's state dir: history travels)
    directory: Path  # the checkpoint directory the training finished in
    codes: tuple[int, ...]  # the wrapper's exit code per pod


def fault_env(tmp_path: Path, script: Path, fault: Fault | None, **extra: str) -> dict[str, str]:
    env = child_env() | extra
    if fault is not None:
        env |= {"PYTHONPATH": f"{FAULTHOOK}:{env.get('PYTHONPATH', REPO)}",
                "FAULT_SPEC": fault.spec, "FAULT_SCRIPT": script.name,
                "FAULT_ONCE": str(tmp_path / "fault-fired"), "FAULT_COUNT": str(fault.count)}
    return env


def _wrap(directory: Path, argv: list[str], env: dict[str, str], options: list[str]
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--checkpoint-dir", str(directory),
         "--node", "node-a", "--backoff", "0", "--grace", "20", *options, "--", *argv],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=400, check=False)


def run_with_fault(tmp_path: Path, script: Path, argv_for: "callable", fault: Fault | None,
                   **extra_env: str) -> Outcome:
    """``argv_for(directory)``: the training's command line for a checkpoint directory."""
    env = fault_env(tmp_path, script, fault, **extra_env)
    first = tmp_path / "pod1" / "ck"
    first.parent.mkdir(parents=True)
    if fault is None or not fault.new_pod:
        done = _wrap(first, argv_for(first), env, [])
        return Outcome(done.stdout + done.stderr, _records(first), first, (done.returncode,))
    store = f"file://{tmp_path / 'store'}"
    pod1 = _wrap(first, argv_for(first), env, ["--checkpoint-url", store, "--max-retries", "0"])
    second = tmp_path / "pod2" / "ck"
    second.parent.mkdir(parents=True)
    pod2 = _wrap(second, argv_for(second), env, ["--checkpoint-url", store])
    return Outcome(pod1.stdout + pod1.stderr + pod2.stdout + pod2.stderr, _records(second),
                   second, (pod1.returncode, pod2.returncode))


def _records(directory: Path) -> list[dict]:
    return [json.loads(p.read_text())
            for p in sorted((directory / ".resched" / "attempts").glob("*.json"))]
