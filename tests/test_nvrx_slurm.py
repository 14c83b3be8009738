"""A training that saves only on SIGTERM, under a real Slurm grace signal (USR1).

Slurm's ``--signal=B:USR1`` (here ``scancel --batch --signal=USR1``) reaches the batch
script, which forwards it to the tasks; ``resched wrap`` hands it to the training as
its stop signal (TERM): the training saves, the job is requeued for free and resumes
from the step where it was stopped. Before ``--stop-signal`` the USR1 killed it unsaved.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from slurm_fixtures import SlurmCluster, slurm_cluster_fixture  # noqa: F401
from test_slurm_cluster import batch_log, submit, task_log, wait_for_master_step, write_workflow

from workflows.backends.slurm.jobside import exclusions
from workflows.backends.slurm.status import read_job_status

# Saves (files, then the marker) ONLY in its SIGTERM handler, like Megatron's
# --exit-signal-handler or NeMo's PreemptionCallback; plain Python, default USR1 action.
TERM_ONLY_TRAIN = textwrap.dedent(
    """\
    import os, pathlib, signal, sys, time
    from wrapper.checkpoint.marker import mark_complete, read_marker

    ck = pathlib.Path(os.environ["RESCHED_CHECKPOINT_DIR"])
    ck.mkdir(parents=True, exist_ok=True)
    start = read_marker(ck) or 0
    print(f"tiny-train: start at step {start}", flush=True)
    step = start

    def save_and_stop(signum, frame):
        (ck / "state.txt").write_text(str(step))
        mark_complete(ck, step)
        # os.write: a print here raises "reentrant call" when the signal lands inside the
        # loop's own print to stdout
        os.write(1, f"tiny-train: saved step {step} on {signal.Signals(signum).name}\\n".encode())
        sys.exit(0)

    signal.signal(signal.SIGTERM, save_and_stop)
    while step < int(os.environ["STEPS"]):
        time.sleep(float(os.environ["STEP_TIME"]))
        step += 1
        print(f"tiny-train: step {step}", flush=True)
    print(f"tiny-train: done at step {step}", flush=True)
    """
)


@pytest.mark.slurm
@pytest.mark.e2e
def test_term_only_training_saves_on_slurm_grace_and_requeues_for_free(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    workdir = tmp_path / "wd"
    workflow = write_workflow(tmp_path, env={"STEPS": "30", "STEP_TIME": "0.1"})
    (tmp_path / "train.py").write_text(TERM_ONLY_TRAIN)
    job_id = submit(slurm_cluster, workflow, max_retry_per_task=0)  # no failure budget
    slurm_cluster.wait_for_state(job_id, {"RUNNING"})
    wait_for_master_step(workdir, job_id, 5)
    slurm_cluster.run("scancel", "--batch", "--signal=USR1", job_id)
    info = slurm_cluster.wait_for_state(job_id, {"COMPLETED", "FAILED"}, timeout_s=120)
    log = batch_log(workdir, job_id)
    assert info["JobState"] == "COMPLETED", log
    assert info["Restarts"] == "1"
    first, second = task_log(workdir, job_id, 0), task_log(workdir, job_id, 1)
    saved = int(first.split("tiny-train: saved step ", 1)[1].split()[0])
    assert "on SIGTERM" in first and saved >= 5  # USR1 arrived, TERM reached the training
    assert f"tiny-train: start at step {saved}" in second  # nothing lost
    status = read_job_status(job_id, workdir=workdir)
    assert [a.result for a in status.allocations] == ["PREEMPT", "COMPLETE"]


def test_exclusions_joins_the_marked_node_and_straggler_nodes() -> None:
    assert exclusions({"exclude_node": True, "node": "dgx-a", "exclude_nodes": ["dgx-b"]}) == "dgx-a,dgx-b"
    assert exclusions({"exclude_node": False, "node": "dgx-a", "exclude_nodes": ["dgx-a"]}) == "dgx-a"
    assert exclusions({"exclude_node": False, "node": "dgx-a"}) == ""
    # hostile names never reach scontrol
    assert exclusions({"exclude_nodes": ["a,b", "x; rm -rf /", "", 3, "ok-1.dc"]}) == "ok-1.dc"
