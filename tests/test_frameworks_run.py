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

from tests.framework_fixtures import FAULTHOOK, MATRIX, TRAININGS
from tests.local_fixtures import REPO, run_local, write_workflow

pytest.importorskip("transformers")
pytestmark = [pytest.mark.e2e, *MATRIX]

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
