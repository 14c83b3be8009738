"""OSMO's checkpoint uploads for a plain task (no resched import, no marker), the same on
the local executor and on a real Slurm: one upload one period after start, a final one
after every exit, and the checkpoint back through the inputs after each reschedule."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from local_fixtures import run_local, write_workflow
from slurm_fixtures import SlurmCluster, slurm_cluster_fixture  # noqa: F401

from workflows.backends.slurm import SlurmBackend
from workflows.pipeline import load_workflow
from workflows.values import ValueOptions

pytestmark = [pytest.mark.e2e]

# The reproduction: a bash task that knows nothing of resched writes
# /tmp/models/state.txt every 0.2 s and exits with its RESCHEDULE code until step 25.
PLAIN = """
workflow:
  name: plain
  tasks:
  - name: train
    command: ["bash", "-c"]
    args:
    - |
      step=$(cat {{{{input:0}}}}/state.txt 2>/dev/null || echo 0)
      echo "plain: resumed at step $step"
      mkdir -p /tmp/models
      for i in $(seq 1 10); do
        step=$((step + 1)); echo $step > /tmp/models/state.txt; echo "plain: step $step"; sleep 0.2
        echo "debug $step" >> /tmp/models/noise.log
      done
      if [ "$step" -lt 25 ]; then exit 3; fi
      echo "plain: done at step $step"
    inputs: [{{url: "file://{store}/models"}}]
    checkpoint: [{{path: /tmp/models, url: "file://{store}", frequency: 1s, regex: 'state\\.txt$'}}]
    exitActions: {{RESCHEDULE: 3}}
"""


def _resumed(logs: list[str]) -> list[int]:
    return [int(re.search(r"plain: resumed at step (\d+)", log).group(1))  # type: ignore[union-attr]
            for log in logs]


def _run_local(tmp_path: Path, spec: Path) -> tuple[list[int], int, bool]:
    run = run_local(spec, "--max-retry-per-task", "2", workdir=tmp_path / "w")
    assert run.returncode == 0, run.stderr
    logs = [run.log("train", pod=i, attempt=i + 1) for i in range(3)]
    finals = [e for e in run.events("checkpoint_uploaded") if e["final"]]
    skipped_final = [e for e in run.events("checkpoint_upload_skipped") if e["final"]]
    assert not skipped_final, skipped_final
    return _resumed(logs), len(finals), "plain: done at step 30" in logs[-1]


def _run_slurm(cluster: SlurmCluster, tmp_path: Path, spec: Path) -> tuple[list[int], int, bool]:
    workdir = tmp_path / "wd"
    job = load_workflow(spec, ValueOptions(), lint_target="slurm")
    backend = SlurmBackend()
    job_id = backend.submit(backend.dry_run(job, {"workdir": workdir,
                                                  "max_retry_per_task": 2})).job_id
    info = cluster.wait_for_state(job_id, {"COMPLETED", "FAILED"}, timeout_s=180)
    batch = (workdir / f"slurm-{job_id}.out").read_text()
    assert info["JobState"] == "COMPLETED", batch
    assert "final upload skipped" not in batch, batch  # (a running one may skip a write)
    logs = [(workdir / job_id / f"allocation-{i}" / "tasks" / "train" / "task.log").read_text()
            for i in range(3)]
    return _resumed(logs), batch.count("checkpoint final upload of"), \
        "plain: done at step 30" in logs[-1]


@pytest.mark.parametrize("backend", ["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def test_plain_task_is_uploaded_after_every_exit_and_resumes(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    spec = write_workflow(tmp_path, PLAIN.format(store=tmp_path / "ck"))
    started = time.monotonic()
    if backend == "local":
        resumed, finals, done = _run_local(tmp_path, spec)
    else:
        cluster = request.getfixturevalue("slurm_cluster")
        resumed, finals, done = _run_slurm(cluster, tmp_path, spec)
    # Each attempt wrote 10 steps and exited 3: the final upload after each exit carried
    # them to the next pod, on both backends alike.
    assert resumed == [0, 10, 20]
    assert finals == 3
    assert done
    # checkpoint regex: honoured on both backends (noise.log never left the pod)
    from wrapper.checkpoint import CheckpointStore

    CheckpointStore(f"file://{tmp_path / 'ck'}/models").restore(tmp_path / "restored")
    assert sorted(p.name for p in (tmp_path / "restored").iterdir()) == ["state.txt"]
    assert (tmp_path / "restored" / "state.txt").read_text().strip() == "30"
    print(f"{backend}: uploads after exit {finals}, resumed {resumed}, "
          f"wall {time.monotonic() - started:.1f}s")
