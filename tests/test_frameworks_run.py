"""`resched run` (the local executor, OSMO's semantics) with a real Hugging Face Trainer
under `resched wrap`, nothing of resched inside the training: a save torn in place
(SIGKILL as HF opens checkpoint-8/trainer_state.json, via the test hook) is moved aside
before the retry, HF resumes from step 4 by its own log, the run completes, and the run
report shows what moved and why."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.framework_fixtures import FAULTHOOK, MATRIX, TRAININGS, needs
from tests.local_fixtures import REPO, run_local, write_workflow

pytestmark = [needs("transformers"), pytest.mark.e2e, *MATRIX]

RESUMED = re.compile(r"Resuming training from checkpoint with epoch \d+ and global step (\d+)")


def test_resched_run_hf_save_torn_in_place(tmp_path: Path) -> None:
    store = tmp_path / "ck"
    spec = write_workflow(tmp_path, f"""
        workflow:
          name: hf
          tasks:
          - name: train
            command: ["bash", "-c", "mkdir -p /tmp/save && cp -a {{{{input:0}}}}/. /tmp/save/ && exec {sys.executable} -m workflows.cli wrap --checkpoint-dir /tmp/save --backoff 0 -- {sys.executable} {TRAININGS / 'hf_trainer.py'} /tmp/save 12 4"]
            environment:
              PYTHONPATH: "{FAULTHOOK}:{REPO}"
              FAULT_SPEC: "kill:open:checkpoint-8/trainer_state\\\\.json "
              FAULT_SCRIPT: hf_trainer.py
              FAULT_ONCE: /tmp/fault-fired
            inputs: [{{url: "file://{store}/save"}}]
            checkpoint: [{{path: /tmp/save, url: "file://{store}", frequency: 10m}}]
            exitActions: {{RESCHEDULE: 3}}
    """)
    run = run_local(spec, workdir=tmp_path / "w", timeout=400)
    assert run.returncode == 0, run.stderr[-4000:]
    log = run.log("train")
    assert [int(s) for s in RESUMED.findall(log)] == [4]
    aside = run.events("wrapper_checkpoint_set_aside", "train")
    assert [[m["path"] for m in e["moved"]] for e in aside] == [["checkpoint-8"]]
    assert "trainer_state.json" in aside[0]["moved"][0]["why"]
    finals = [e["step"] for e in run.events("checkpoint_uploaded") if e["final"]]
    assert finals == [12]


LIGHTNING_STARTS = re.compile(r"lightning-train: training starts at global step (\d+)")


def test_resched_run_lightning_link_mode_moves_pods_with_its_last_link(tmp_path: Path) -> None:
    """Lightning's save_last="link" (last.ckpt a link to the newest step file) under
    periodic uploads: the link goes up as a copy of its step file, a pod kill moves the
    task, the new pod's fit("last") resumes from the uploaded step, the run completes."""
    pytest.importorskip("lightning")
    store = tmp_path / "ck"
    spec = write_workflow(tmp_path, f"""
        workflow:
          name: lightning-link
          tasks:
          - name: train
            command: ["bash", "-c", "mkdir -p /tmp/save && cp -a {{{{input:0}}}}/. /tmp/save/ && exec {sys.executable} -m workflows.cli wrap --checkpoint-dir /tmp/save --backoff 0 -- {sys.executable} {TRAININGS / 'lightning_train.py'} /tmp/save 3000 100 link"]
            environment: {{PYTHONPATH: "{REPO}"}}
            inputs: [{{url: "file://{store}/save"}}]
            checkpoint: [{{path: /tmp/save, url: "file://{store}", frequency: 1s}}]
            exitActions: {{RESCHEDULE: 137}}
    """)
    run = run_local(spec, "--chaos", "podkill:train@1ckpt", workdir=tmp_path / "w", timeout=400)
    assert run.returncode == 0, run.stderr[-4000:]
    uploaded = [e["step"] for e in run.events("checkpoint_uploaded") if e.get("step")]
    assert uploaded, "no upload carried a step"
    pods = run.attempts("train")
    assert len(pods) == 2 and pods[0]["action"] == "RESCHEDULE"
    starts = [int(s) for s in LIGHTNING_STARTS.findall(run.log("train", pod=1, attempt=2))]
    staged = [e["step"] for e in run.events("inputs_staged", "train") if e["retry_id"] == 1]
    assert starts and staged and starts[0] == staged[0] > 0  # resumed, not from 0
    finals = [e["step"] for e in run.events("checkpoint_uploaded") if e["final"]]
    assert finals[-1] == 3000
