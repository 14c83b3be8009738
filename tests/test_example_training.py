"""examples/ddp_train.py under real torchruns: checkpoints, bit-exact resume, graceful stop."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
from example_training_fixtures import (
    CHECKPOINT_EVERY,
    CHECKPOINT_RE,
    REPO,
    RESUMED_RE,
    SCRIPT,
    STEP_RE,
    STEPS,
    TRAIN_ARGS,
    FinishedRun,
    Launcher,
    alive,
    checkpoint_files,
    free_port,
    launcher_fixture,  # noqa: F401 - registers the fixture
    reference_run_fixture,  # noqa: F401 - registers the fixture
    steps_of,
)

from wrapper.checkpoint.marker import MARKER_NAME, read_marker

pytestmark = [pytest.mark.torch, pytest.mark.e2e]


def test_fault_free_run_checkpoints_and_prints_checksum(
        reference_run: tuple[FinishedRun, Path]) -> None:
    run, ckpt = reference_run
    text = run.text()
    assert steps_of(STEP_RE, text) == list(range(1, STEPS + 1))
    cadence = [s for s in range(1, STEPS + 1) if s % CHECKPOINT_EVERY == 0 or s == STEPS]
    assert steps_of(CHECKPOINT_RE, text) == cadence
    assert RESUMED_RE.search(text) is None
    checksum = run.checksum()
    assert (ckpt / "FINISHED").read_text().split() == [str(STEPS), checksum]
    assert read_marker(ckpt) == STEPS
    # only the last two checkpoints are kept, and the marker is the newest file
    assert checkpoint_files(ckpt) == [f"ckpt-{s:08d}.pt" for s in cadence[-2:]]
    newest = max(ckpt.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert newest.name == MARKER_NAME


def kill_at_step(launcher: Launcher, ckpt: Path, step: int) -> int:
    """Start a run, SIGKILL its launcher's process group once `step` is logged.

    Returns the step of the newest checkpoint file left (the one a resume must load)."""
    run = launcher.start(ckpt, *TRAIN_ARGS, "--step-time", "0.05", name=f"kill-at-{step}")
    run.wait_for(rf"^resched-train: step {step} loss ")
    workers = run.note_workers()
    assert len(workers) == 2
    os.killpg(run.proc.pid, signal.SIGKILL)
    run.proc.wait()
    # the workers live in sessions of their own: they notice the launcher is gone and exit
    for pid in workers:
        for _ in range(600):
            if not alive(pid):
                break
            time.sleep(0.05)
        assert not alive(pid), f"worker {pid} outlived its launcher"
    newest = checkpoint_files(ckpt)[-1]
    return int(newest[len("ckpt-"):-len(".pt")])


def test_sigkill_at_random_steps_then_resume_is_bit_exact(
        launcher: Launcher, tmp_path: Path, reference_run: tuple[FinishedRun, Path]) -> None:
    seed = random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    ckpt = tmp_path / "ckpt"
    first = rng.randrange(CHECKPOINT_EVERY + 1, STEPS // 2)
    marker = kill_at_step(launcher, ckpt, first)
    second = rng.randrange(marker + 1, STEPS - 2)
    resumed_marker = kill_at_step(launcher, ckpt, second)
    final = launcher.run(ckpt, *TRAIN_ARGS)
    note = f"seed {seed}: killed at steps {first} and {second}"
    assert final.proc.returncode == 0, note + final.text()[-4000:]
    assert steps_of(RESUMED_RE, final.text()) == [resumed_marker], note
    assert final.checksum() == reference_run[0].checksum(), note


def test_worker_with_empty_checkpoint_dir_resumes_bit_exact(
        launcher: Launcher, tmp_path: Path, reference_run: tuple[FinishedRun, Path]) -> None:
    """Two torchruns as two tasks without a shared filesystem; the worker restarts empty."""
    master_dir, worker_dir, fresh_worker_dir = (tmp_path / n for n in ("m", "w", "w2"))
    port = free_port()
    fault = ("--fault", "kill", "--fail-at-step", "13", "--fail-rank", "1")
    runs = [launcher.start(d, *TRAIN_ARGS, *fault, nnodes=2, node_rank=r, port=port,
                           name=f"node{r}") for r, d in ((0, master_dir), (1, worker_dir))]
    assert [run.wait() for run in runs] != [0, 0]
    assert read_marker(master_dir) == 10
    assert not worker_dir.exists() or not any(worker_dir.iterdir())  # rank 0 alone writes

    port = free_port()
    runs = [launcher.start(d, *TRAIN_ARGS, nnodes=2, node_rank=r, port=port, name=f"again{r}")
            for r, d in ((0, master_dir), (1, fresh_worker_dir))]
    assert [run.wait() for run in runs] == [0, 0], runs[0].text()[-3000:]
    assert steps_of(RESUMED_RE, runs[0].text()) == [10]
    assert runs[0].checksum() == reference_run[0].checksum()
    # each task's wrapper finds the finished flag in its own directory
    assert (master_dir / "FINISHED").read_text().split() == [str(STEPS), runs[0].checksum()]
    assert (fresh_worker_dir / "FINISHED").exists()
    assert checkpoint_files(fresh_worker_dir) == []


def test_sigterm_to_launcher_saves_and_stops_unfinished_then_resumes_losing_nothing(
        launcher: Launcher, tmp_path: Path, reference_run: tuple[FinishedRun, Path]) -> None:
    ckpt = tmp_path / "ckpt"
    run = launcher.start(ckpt, *TRAIN_ARGS, "--step-time", "0.05")
    run.wait_for(r"^resched-train: step 7 loss ")
    run.proc.send_signal(signal.SIGTERM)  # torchrun forwards it to its workers
    run.wait()
    stopped = run.wait_for(r"stopped by signal after step (\d+) \(checkpoint step (\d+)\)")
    assert stopped.group(1) == stopped.group(2)
    last_step = int(stopped.group(1))
    assert max(steps_of(STEP_RE, run.text())) == last_step  # nothing ran past the save
    assert read_marker(ckpt) == last_step
    assert not (ckpt / "FINISHED").exists()

    final = launcher.run(ckpt, *TRAIN_ARGS)
    assert steps_of(RESUMED_RE, final.text()) == [last_step]  # zero lost steps
    assert final.checksum() == reference_run[0].checksum()


def test_sigterm_to_workers_exits_zero_without_finished_flag(
        launcher: Launcher, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    run = launcher.start(ckpt, *TRAIN_ARGS, "--step-time", "0.05")
    run.wait_for(r"^resched-train: step 3 loss ")
    for pid in run.note_workers():
        os.kill(pid, signal.SIGTERM)
    assert run.wait() == 0  # every worker exited 0, so torchrun reports success...
    assert not (ckpt / "FINISHED").exists()  # ...and only the missing flag says "not done"
    assert read_marker(ckpt) == max(steps_of(STEP_RE, run.text()))


def test_shipped_template_carries_this_script() -> None:
    shipped = REPO / "templates" / "train.py"
    assert shipped.read_bytes() == SCRIPT.read_bytes(), (
        "templates/train.py differs from examples/ddp_train.py: copy the example over it")
