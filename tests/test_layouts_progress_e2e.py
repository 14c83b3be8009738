"""Progress from the frameworks' own files, no resched marker: the wrapper's records, its
budgets and the local executor's run report read Megatron's tracker."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from local_fixtures import run_local, write_workflow

from tests.supervise_fixtures import REPO, child_env

pytestmark = pytest.mark.e2e

# Megatron-style: each run saves 10 more iterations (iter dir, then the tracker), then
# fails with an error the catalogue retries in place, until iteration 50.
MEGATRON_RUN = textwrap.dedent("""
    import os, sys
    root = sys.argv[1]
    tracker = os.path.join(root, "latest_checkpointed_iteration.txt")
    start = int(open(tracker).read()) if os.path.exists(tracker) else 0
    print(f"megatron-like: resumed at iteration {start}", flush=True)
    it = start + 10
    d = os.path.join(root, f"iter_{it:07d}")
    os.makedirs(d, exist_ok=True)
    for name in ("common.pt", "__0_0.distcp", ".metadata"):
        open(os.path.join(d, name), "w").write(f"iter {it}")
    open(os.path.join(d, "metadata.json"), "w").write('{"sharded_backend": "torch_dist"}')
    open(tracker, "w").write(str(it))
    if it < 50:
        print("RuntimeError: transient glitch", file=sys.stderr, flush=True)
        sys.exit(1)
""")


def test_wrapper_budget_resets_on_megatron_progress_and_records_the_steps(
        tmp_path: Path) -> None:
    ck = tmp_path / "save"
    ck.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(tmp_path / "state"),
         "--checkpoint-dir", str(ck), "--node", "node-a", "--max-retries", "1", "--",
         sys.executable, "-c", MEGATRON_RUN, str(ck)],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    # 4 failures with a retry budget of 1: only the progress between them keeps it going.
    assert done.returncode == 0, done.stderr
    records = [json.loads(p.read_text())
               for p in sorted((tmp_path / "state" / "attempts").glob("*.json"))]
    assert [(r["checkpoint_step_before"], r["checkpoint_step_after"]) for r in records] == [
        (None, 10), (10, 20), (20, 30), (30, 40), (40, 50)]
    assert [r["decision"] for r in records] == ["retry"] * 4 + ["complete"]


def test_local_report_shows_the_trackers_iteration_uploaded_and_resumed(tmp_path: Path) -> None:
    store = tmp_path / "ck"
    script = "\n".join(" " * 16 + line for line in MEGATRON_RUN.strip().splitlines())
    spec = write_workflow(tmp_path, f"""
        workflow:
          name: mega
          tasks:
          - name: train
            command: ["bash", "-c", "mkdir -p /tmp/save && cp -a {{{{input:0}}}}/. /tmp/save/ && python /tmp/job/run.py /tmp/save || exit 3"]
            files:
            - path: /tmp/job/run.py
              contents: |
{script}
            inputs: [{{url: "file://{store}/save"}}]
            checkpoint: [{{path: /tmp/save, url: "file://{store}", frequency: 1m}}]
            exitActions: {{RESCHEDULE: 3}}
    """)
    run = run_local(spec, "--max-retry-per-task", "5", workdir=tmp_path / "w")
    assert run.returncode == 0, run.stderr
    finals = [e["step"] for e in run.events("checkpoint_uploaded") if e["final"]]
    assert finals == [10, 20, 30, 40, 50]
    # the first pod staged an empty store (nothing to resume); each next one the tracker's
    assert [a["resumed_from_step"] for a in run.attempts("train")] == [None, 10, 20, 30, 40]
