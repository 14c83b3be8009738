"""Real Hugging Face and Lightning trainings (examples/frameworks/, nothing of resched in
them) under `resched run` with an @Nckpt chaos fault: the report sees their progress from
their own progress bar / checkpoint folders, the fault fires on their uploads, and the
ETTR and the fault's lost steps are computed (issue 19 part 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from local_fixtures import REPO, run_local, write_workflow

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLES = REPO / "examples" / "frameworks"


def _workflow(tmp_path: Path, script: str, args: str) -> Path:
    store = tmp_path / "store"
    (store / "out").mkdir(parents=True)
    return write_workflow(tmp_path, f"""
        workflow:
          name: fw
          tasks:
          - name: train
            command: ["bash", "-c", "mkdir -p /tmp/out && cp -a {{{{input:0}}}}/. /tmp/out/; resched wrap --checkpoint-dir /tmp/out -- python {EXAMPLES / script} --output-dir /tmp/out {args}"]
            inputs: [{{url: "file://{store}/out"}}]
            checkpoint: [{{path: /tmp/out, url: "file://{store}", frequency: 2s}}]
            exitActions: {{RESCHEDULE: "3,137"}}
    """)


@pytest.mark.parametrize(("script", "args", "source"), [
    ("hf_trainer.py", "--max-steps 100 --save-steps 10 --step-time 0.05", "hf-trainer-bar"),
    ("lightning_train.py", "--max-steps 100 --save-steps 10 --step-time 0.05",
     "checkpoint-folder"),
])
def test_framework_training_shows_progress_and_takes_a_ckpt_fault(
        tmp_path: Path, script: str, args: str, source: str) -> None:
    spec = _workflow(tmp_path, script, args)
    run = run_local(spec, "--chaos", "kill:train@1ckpt", "--max-retry-per-task", "2",
                    workdir=tmp_path / "w")
    assert run.returncode == 0, run.stderr[-3000:]
    steps = run.events("step", "train")
    assert source in {e.get("source") for e in steps}
    assert max(e["step"] for e in steps) == 100
    assert [f["spec"] for f in run.report["faults"]] == ["kill:train@1ckpt"]
    fault = run.report["faults"][0]
    assert fault["step_before"] is not None  # not "before the first training step"
    assert fault["restored_step"] is not None and fault.get("lost_steps") is not None
    metrics = run.report["metrics"]
    assert metrics["ettr"] is not None and metrics["useful_steps"] > 0
    assert source in metrics["progress_source"]
    assert "ETTR" in run.stderr and "no training steps were seen" not in run.stderr
