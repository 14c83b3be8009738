"""The example training's injected faults, run for real (torchrun, 2 ranks, gloo, CPU),
classified from the saved log and error files exactly as `resched classify` does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wrapper.classifier import classify_artifacts
from wrapper.classifier.rules import load_rules

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ddp_train.py"


def run_fault(tmp_path: Path, fault: str) -> tuple[int, Path, list[Path]]:
    log = tmp_path / f"{fault}.log"
    elastic = tmp_path / "elastic"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    with open(log, "w") as out:
        code = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
             "--log-dir", str(elastic), str(EXAMPLE), "--checkpoint-dir", str(tmp_path / "ckpt"), "--steps", "6",
             "--checkpoint-every", "2", "--fail-at-step", "3", "--fault", fault, "--fail-rank", "1"],
            stdout=out, stderr=subprocess.STDOUT, env=env, timeout=240, check=False,
        ).returncode
    return code, log, sorted(elastic.rglob("error.json"))


@pytest.mark.e2e
@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.skipif(not EXAMPLE.exists(), reason="examples/ddp_train.py not present")
@pytest.mark.parametrize(
    ("fault", "rule", "decision"),
    [
        ("nccl", "nccl-error", "retry"),
        ("oom", "cuda-oom", "abort"),
        ("exit17", "megatron-rerun-17-transient", "retry"),
        ("kill", "killed-by-signal", "retry"),
    ],
)
def test_example_fault_is_classified(tmp_path: Path, fault: str, rule: str, decision: str) -> None:
    code, log, error_files = run_fault(tmp_path, fault)
    assert code == 1, log.read_text()[-3000:]  # torchrun hides the worker's own code
    diagnosis = classify_artifacts(logs=[log], error_files=error_files, exit_code=code, signal=None,
                                   rules=load_rules())
    assert (diagnosis.rule_id, diagnosis.decision) == (rule, decision), diagnosis.to_json()
    if fault == "exit17":  # every rank exits 17 (Megatron's rerun machine is collective)
        assert diagnosis.rank_exit_codes[diagnosis.root_cause_rank] == 17
    else:  # one rank failed; the other's gloo errors are the cascade
        assert diagnosis.root_cause_rank == 1, diagnosis.to_json()
