"""`resched run` (the local executor, OSMO's semantics) with the Megatron-Core and DeepSpeed
examples (examples/frameworks/, 2 ranks over gloo under torchrun, nothing of resched in
them) under `resched wrap`, and three faults in one run:

- a pod killed in the middle of the save of step 8 (the test hook SIGKILLs `resched wrap`
  and the rank as the rank writes that save; the task exits 137 -> RESCHEDULE): the new
  pod starts with an empty /tmp, restores the newest whole step from the store, never
  the torn save;
- chaos ``kill`` after the run's 3rd upload of a newer step (retried in place);
- chaos ``term`` after the 5th (the wrapper stops the training, reschedules).

Each resume is the framework's own (Megatron's "successfully loaded checkpoint ... at
iteration N", DeepSpeed's global_steps after load_checkpoint), equals the step the run
restored, and the final weights equal a fault-free run's bit for bit. ~1-2 min each:
part of the opt-in framework matrix.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.framework_fixtures import FAULTHOOK, MATRIX
from tests.local_fixtures import REPO, run_local, write_workflow
from tests.supervise_fixtures import child_env

pytestmark = [pytest.mark.e2e, *MATRIX]

EXAMPLES = REPO / "examples" / "frameworks"
STEPS, EVERY = 24, 4


@dataclass(frozen=True)
class Case:
    module: str  # importorskip
    script: str
    loaded: str  # the framework's resume line: group 1 is the step it resumed from
    mid_save: str  # the hook's trigger inside the save of step 8
    rank: str  # the rank the hook arms
    finals: tuple[str, ...]  # the final weights, beside the checkpoint folder
    env: tuple[tuple[str, str], ...] = ()


MEGATRON = Case("megatron.core", "megatron_train.py",
                r"successfully loaded checkpoint from \S+ \[ t 1/2, p 1/1 \] at iteration (\d+)",
                r"open:iter_0000008/\.metadata\.tmp ", "0", ("final-tp0.pt", "final-tp1.pt"))
DEEPSPEED = Case("deepspeed", "deepspeed_train.py", r"deepspeed-train: loaded \S+ at global step (\d+)",
                 r"os.mkdir:/global_step8 ", "1", ("final.pt",), (("DS_ACCELERATOR", "cpu"),))


def _training(case: Case, out: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            "2", str(EXAMPLES / case.script), "--output-dir", f"{out}/save", "--max-steps",
            str(STEPS), "--save-steps", str(EVERY), "--step-time", "0.25", "--final-dir", out]


@pytest.mark.parametrize("case", [MEGATRON, DEEPSPEED], ids=["megatron", "deepspeed"])
def test_resched_run_podkill_mid_save_kill_and_term(tmp_path: Path, case: Case) -> None:
    pytest.importorskip(case.module)
    clean = tmp_path / "clean"
    (clean / "save").mkdir(parents=True)
    done = subprocess.run(_training(case, str(clean)), cwd=REPO,
                          env=child_env(**dict(case.env)), capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    workdir = tmp_path / "w"
    store = tmp_path / "store"
    (store / "save").mkdir(parents=True)
    env = "".join(f"\n              {k}: \"{v}\"" for k, v in case.env)
    training = " ".join(_training(case, "/tmp/run"))
    spec = write_workflow(tmp_path, f"""
        workflow:
          name: fw
          tasks:
          - name: train
            command: ["bash", "-c", "mkdir -p /tmp/run/save && cp -a {{{{input:0}}}}/. /tmp/run/save/ && exec {sys.executable} -m workflows.cli wrap --checkpoint-dir /tmp/run/save --backoff 0 -- {training}"]
            environment:
              PYTHONPATH: "{FAULTHOOK}:{REPO}"
              FAULT_SPEC: "podkill:{case.mid_save.replace(chr(92), chr(92) * 2)}"
              FAULT_SCRIPT: {case.script}
              FAULT_RANK: "{case.rank}"
              FAULT_TERM_UP: "2"
              FAULT_ONCE: "{workdir}/fault-fired"{env}
            inputs: [{{url: "file://{store}/save"}}]
            checkpoint: [{{path: /tmp/run/save, url: "file://{store}", frequency: 1s}}]
            exitActions: {{RESCHEDULE: "3,137"}}
    """)
    run = run_local(spec, "--chaos", "kill:train@3ckpt,term:train@5ckpt",
                    "--max-retry-per-task", "4", workdir=workdir, timeout=500)
    assert run.returncode == 0, run.stderr[-4000:]
    assert (workdir / "fault-fired").exists()  # the pod kill inside the save happened
    pods = sorted((workdir / "tasks" / "train").glob("pod-*"), key=lambda p: int(p.name[4:]))
    logs = [log.read_text() for pod in pods
            for log in sorted(pod.glob("run-*.log"), key=lambda p: int(p.stem[4:]))]
    # (DeepSpeed's line also says where a fresh start began: step 0, not a resume)
    resumed = [int(s) for text in logs for s in re.findall(case.loaded, text) if int(s)]
    attempts = run.attempts("train")
    codes = [a.get("exit_code") for a in attempts]
    assert 137 in codes, codes  # the pod kill ended its pod
    assert len(pods) >= 3  # the pod kill and the term each moved the task to a new pod
    faults = run.report["faults"]
    assert sorted(f["spec"] for f in faults) == ["kill:train@3ckpt", "term:train@5ckpt"]
    # every resume is the framework's own, from a whole step the store held (after the pod
    # kill: the step before the torn save of 8, never 8), and the step the report says
    assert resumed and all(step % EVERY == 0 and 0 < step < STEPS for step in resumed)
    assert resumed[0] < 8
    for fault in faults:
        assert fault["restored_step"] in resumed and fault["lost_steps"] is not None, fault
    if case is MEGATRON:  # the report reads the same resumes from Megatron's lines
        assert [e.get("step") for e in run.events("training_resumed", "train")] == resumed
        assert "megatron-iteration" in run.report["metrics"]["progress_source"]
    assert run.report["metrics"]["ettr"] is not None
    for name in case.finals:
        final = pods[-1] / "tmp" / "run" / name
        assert final.read_bytes() == (clean / name).read_bytes(), name
    print(f"{case.script}: resumed from {resumed}, exit codes {codes}, "
          f"faults {[(f['spec'], f.get('step_before'), f.get('restored_step'), f.get('lost_steps')) for f in faults]}, "
          "final weights equal")
    print("\n".join(line for line in run.stderr.splitlines() if "ETTR" in line))
