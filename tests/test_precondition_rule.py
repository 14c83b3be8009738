"""python-precondition-error: a generic exception whose message states a failed check of the
code's own inputs aborts; one about the environment, or negated, does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from wrapper.classifier import load_rules
from wrapper.classifier.verdict import classify_artifacts
from wrapper.decision import Decision

RULES = load_rules()
TB = 'Traceback (most recent call last):\n  File "train.py", line 40, in <module>\n    main()\n'


def _judge(tmp_path: Path, exception_line: str):
    log = tmp_path / "run.log"
    log.write_text(TB + exception_line + "\n")
    return classify_artifacts(logs=[log], error_files=[], exit_code=1, signal=None, rules=RULES)


@pytest.mark.parametrize("line", [
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
    "RuntimeError: shape '[4, -1, 64]' is invalid for input of size 1000",
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x512 and 256x10)",
    "RuntimeError: Error(s) in loading state_dict for GPT:\n\tsize mismatch for wte.weight",
    "RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'",
    "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn",
    "RuntimeError: The size of tensor a (4) must match the size of tensor b (8) at non-singleton dimension 1",
    "RuntimeError: stack expects each tensor to be equal size, but got [3, 224, 224] at entry 0",
    "[rank1]: RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.",
    "(TrainWorker pid=9) Exception: unsupported model type 'foo' in config",
    "RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
    "jaxlib.xla_extension.XlaRuntimeError: INVALID_ARGUMENT: Cannot shard a dimension of size 7 over 8 devices",
    "jax.errors.JaxRuntimeError: FAILED_PRECONDITION: Buffer has been deleted or donated.",
])
def test_a_failed_precondition_aborts(tmp_path: Path, line: str) -> None:
    diagnosis = _judge(tmp_path, line)
    assert diagnosis.decision is Decision.ABORT, (diagnosis.rule_id, diagnosis.why_won)


@pytest.mark.parametrize("line", [
    # the environment, not the code's inputs
    "RuntimeError: Timed out after 1800 seconds; expected 8 workers to join",
    "RuntimeError: Connection reset by peer: expected 4096 bytes",
    "RuntimeError: The server socket has failed to listen on any local network address (invalid port)",
    "RuntimeError: NCCL error: invalid usage, expected ranks to agree",
    "RuntimeError: CUDA error: invalid device ordinal",
    "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
    "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: failed to connect to all addresses",
    "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out",
    # negated or no validation words: nothing says the inputs are wrong
    "RuntimeError: step 2201 produced a result the trainer did not expect",
    "RuntimeError: training diverged",
    # a precondition only mentioned inside a longer message of another class
    "torch.distributed.DistBackendError: [3] is setting up NCCL communicator: Expected 2 ranks",
])
def test_the_environment_or_a_mention_does_not(tmp_path: Path, line: str) -> None:
    diagnosis = _judge(tmp_path, line)
    assert diagnosis.rule_id != "python-precondition-error", diagnosis.why_won


def test_a_specific_rule_outranks_it(tmp_path: Path) -> None:
    # a transient failure earlier in the log decides; the precondition line is its echo
    log = tmp_path / "run.log"
    log.write_text("NCCL WARN NET/Socket : Connection reset by peer\n" + TB
                   + "RuntimeError: Expected all tensors to be on the same device\n")
    diagnosis = classify_artifacts(logs=[log], error_files=[], exit_code=1, signal=None, rules=RULES)
    assert diagnosis.rule_id != "python-precondition-error"


@pytest.mark.parametrize(("line", "aborts"), [
    ("terminate called after throwing an instance of 'std::invalid_argument'\n  what():  stoi", True),
    ("terminate called after throwing an instance of 'std::out_of_range'\n  what():  vector::_M_range_check", True),
    # a runtime_error / system_error says nothing by itself
    ("terminate called after throwing an instance of 'std::system_error'\n  what():  Resource temporarily unavailable", False),
])
def test_the_cpp_form_of_a_failed_precondition(tmp_path: Path, line: str, aborts: bool) -> None:
    log = tmp_path / "run.log"
    log.write_text(line + "\n")
    diagnosis = classify_artifacts(logs=[log], error_files=[], exit_code=None, signal=6, rules=RULES)
    assert (diagnosis.rule_id == "python-precondition-error") is aborts, diagnosis.why_won


@pytest.mark.parametrize(("line", "rule"), [
    ("bash: line 1: torchrun: command not found", "command-not-found-in-log"),
    ("/bin/bash: /workspace/run.sh: Permission denied", "command-not-found-in-log"),
    ("sh: 1: deepspeed: not found", "command-not-found-in-log"),
    ("/usr/bin/env: 'python3.11': No such file or directory", "command-not-found-in-log"),
    ("exec /usr/local/bin/torchrun: exec format error", "command-not-found-in-log"),
    ('OCI runtime create failed: runc create failed: unable to start container process: exec: "train.sh": '
     "executable file not found in $PATH: unknown", "command-not-found-in-log"),
    ("sbatch: error: Batch job submission failed: Requested node configuration is not available",
     "scheduler-request-invalid"),
    ("salloc: error: Job submit/allocate failed: Invalid account or account/partition combination specified",
     "scheduler-request-invalid"),
])
def test_the_shell_runtime_and_scheduler_refusals(tmp_path: Path, line: str, rule: str) -> None:
    log = tmp_path / "run.log"
    log.write_text(line + "\n")
    diagnosis = classify_artifacts(logs=[log], error_files=[], exit_code=None, signal=None, rules=RULES)
    assert (diagnosis.rule_id, diagnosis.decision) == (rule, Decision.ABORT), diagnosis.why_won


@pytest.mark.parametrize("line", [
    "ssh: connect to host node-3 port 22: Permission denied (publickey)",
    "srun: error: Unable to create step for job 812344: Requested nodes are busy",
    "warning: bash completion: command not found in cache",
])
def test_near_misses_of_the_refusals(tmp_path: Path, line: str) -> None:
    log = tmp_path / "run.log"
    log.write_text(line + "\n")
    diagnosis = classify_artifacts(logs=[log], error_files=[], exit_code=1, signal=None, rules=RULES)
    assert diagnosis.rule_id not in {"command-not-found-in-log", "scheduler-request-invalid"}
