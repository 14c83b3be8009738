"""Issue 20, third round: family rules written from the sources' message shapes (cited in
the catalogue), each with a near miss, and the defaults that decide under uncertainty:
a normal exit when the exit status is unknown, the specific success line over the
generic one, and the decisions the cost table picks where the evidence leaves two open."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_rules_tables import RULES, diagnose
from wrapper.classifier.costs import least_regret
from wrapper.decision import Decision

WARNING_AT_EXIT = ("[rank0]:[W1121 04:00:01.1 ProcessGroupNCCL.cpp:1250] Warning: WARNING: destroy_process_group() "
                   "was not called before program exit, which can leak resources.")


@pytest.mark.parametrize(("line", "rule", "decision"), [
    # ---- the training finished ----
    # ms-swift SwiftPipeline.main()
    ("[INFO:swift] End time of running main: 2026-11-21 03:59:58.123456", "finished-swift", "complete"),
    # Megatron-LM / GPT-NeoX pretrain(): the evaluation after train() returned
    (" validation loss at the end of training for val data | lm loss value: 2.1E+00 |", "finished-megatron", "complete"),
    # a script's own closing line, after log prefixes
    ("2026-11-21 03:59:58,001 - INFO - Training completed in 5.2 hours", "finished-script-line", "complete"),
    ("[12:00:01] Finished training, saving the model", "finished-script-line", "complete"),
    # ESPnet's Trainer.run after its epoch loop
    ("2026-11-21 03:59:58,001 (trainer:356) INFO: The training was finished at 70 epochs ", "finished-script-line", "complete"),
    # Ultralytics BaseTrainer
    ("300 epochs completed in 12.345 hours.", "finished-script-line", "complete"),
    # ---- node loss / preemption ----
    # Taskcluster worker-runner's metadata poll (AWS / GCP providers)
    ("2026/11/21 03:40:00 EC2 Metadata Service says termination is imminent", "platform-preempted", "reschedule"),
    # SkyPilot's managed-job controller
    ("I 11-21 03:40:00 controller.py:118] Cluster is preempted (status: STOPPED). Recovering...", "platform-preempted", "reschedule"),
    ("The worker node was preempted by the cloud provider", "platform-preempted", "reschedule"),
    ("Azure Batch: low-priority node was evicted", "platform-preempted", "reschedule"),
    # Kubeflow training-operator / JobSet / Job controller verdicts without the replica's log
    ("Message: PyTorchJob team/llm has failed because 2 Worker replica(s) failed.", "platform-job-failed", "reschedule"),
    ("  Reason: FailedJobs  Message: jobset failed due to one or more job failures", "platform-job-failed", "reschedule"),
    ("Warning  BackoffLimitExceeded  job-controller  Job has reached the specified backoff limit", "platform-job-failed", "reschedule"),
    # a bare cancellation (slurmstepd on a preempted job's steps, a person's scancel, sacct)
    ("slurmstepd: error: *** STEP 1234.0 ON gpu-a-7 CANCELLED AT 2026-11-21T03:40:00 ***", "cancelled", "reschedule"),
    ("1234.0   python   gpu   acct   16   CANCELLED by 5012   0:15", "cancelled", "reschedule"),
    # Lightning's SLURM auto-requeue handler
    ("Handling auto-requeue signal: 10", "preempted", "reschedule"),
    # ---- GPU / driver / accelerator state ----
    ("cudaGetDeviceCount returned 999", "gpu-driver-fabric-fault", "reschedule"),
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).", "gpu-driver-fabric-fault", "reschedule"),
    ("No devices were found", "gpu-driver-fabric-fault", "reschedule"),
    ("RuntimeError: Unable to initialize backend 'tpu': ABORTED: TPU initialization failed: open(/dev/accel0): "
     "Device or resource busy", "gpu-driver-fabric-fault", "reschedule"),
    # ---- deterministic configuration / code ----
    ("hydra.errors.ConfigCompositionException: Could not override 'optim.warmup'.", "config-error", "abort"),
    ("omegaconf.errors.ConfigAttributeError: Key 'lr_decay' is not in struct", "config-error", "abort"),
    ("omegaconf.errors.MissingMandatoryValue: Missing mandatory value: data.path", "config-error", "abort"),
    ("train.py: error: the following arguments are required: --data", "config-error", "abort"),
    ("Some specified arguments are not used by the HfArgumentParser: ['--lr0']", "config-error", "abort"),
    ("Nov 21 03:40:00 node kernel: python[4113]: segfault at 0 ip 00007f1c2b3c4d5e sp 00007ffd1a2b3c40 error 4 in "
     "fused_adam_cuda.cpython-310-x86_64-linux-gnu.so[7f1c2b300000+200000]", "fused-kernel-crash", "abort"),
    ("RuntimeError: unable to open shared memory object </torch_4113_99_1> in read-write mode: "
     "Too many open files (24)", "dataloader-shm-exhausted", "abort"),
    ("OSError: libcudnn_ops_infer.so.8: cannot open shared object file: No such file or directory", "abi-mismatch", "abort"),
    ("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.",
     "torch-program-error", "abort"),
    ("RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.", "loss-nan", "abort"),
    # ---- memory, start-up races, remote services: retried ----
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "host-oom-kill", "retry"),
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 5, for key: "
     "store_based_barrier_key:1 (world_size=16, worker_count=8, timeout=0:30:00)", "rendezvous-timeout", "retry"),
    ("huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub "
     "and we cannot find the requested files in the local cache.", "remote-service-unavailable", "retry"),
    ("OSError: [Errno 113] No route to host", "python-transient-error", "retry"),
    # torch.save's writer when the volume fills (caffe2/serialize/inline_container.cc)
    ("RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 8814208 vs 8814096",
     "storage-io-error", "retry"),
    ("RuntimeError: PytorchStreamWriter failed writing file data/12: file write failed", "storage-io-error", "retry"),
    # kubelet's eviction on a node condition
    ("  Warning  Evicted  3m  kubelet  The node had condition: [MemoryPressure].", "preempted", "reschedule"),
    # ---- more of PyTorch's TORCH_CHECKs, cuBLAS's allocation, a model path without the file ----
    ("RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 64 but got size 32 for tensor number 1 in the list.",
     "torch-program-error", "abort"),
    ("RuntimeError: stack expects each tensor to be equal size, but got [3, 224, 224] at entry 0 and [3, 200, 224] at entry 5",
     "torch-program-error", "abort"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cuda-oom", "abort"),
    ("OSError: /ckpt/llama-3-8b does not appear to have a file named config.json.", "config-error", "abort"),
    ("RuntimeError: Too many open files. Communication with the workers is no longer possible. Please increase "
     "the limit using `ulimit -n` in the shell", "dataloader-shm-exhausted", "abort"),
    ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised: CompilationError", "torch-program-error", "abort"),
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "cuda-program-error", "abort"),
    ("terminate called after throwing an instance of 'std::bad_alloc'", "host-oom-kill", "retry"),
    # ---- launchers' reports of a child's death by a signal ----
    ("[2026-11-21 03:40:00,000] [ERROR] [launch.py:321:sigkill_handler] ['python', 'train.py'] exits with return code = -11",
     "signal-death-in-log", "retry"),
    ("Signal 9 (SIGKILL) received by PID 4113", "signal-death-in-log", "retry"),
    ("subprocess.CalledProcessError: Command '['python', 'train.py']' died with <Signals.SIGSEGV: 11>.",
     "signal-death-in-log", "retry"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 3 terminated with signal SIGKILL",
     "signal-death-in-log", "retry"),
    ("Fatal Python error: Bus error", "signal-death-in-log", "retry"),
    ("*** SIGSEGV (@0x8) received by PID 4113 (TID 0x7f00) from PID 8; stack trace: ***", "signal-death-in-log", "retry"),
])
def test_source_line_decides(tmp_path: Path, line: str, rule: str, decision: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line, "exiting"])
    assert (d.rule_id, str(d.decision)) == (rule, decision), d.why_won


@pytest.mark.parametrize(("line", "not_rule"), [
    # an epoch's, a step's or a fold's end is no end of training
    ("Epoch 3: training finished, validating", "finished-script-line"),
    ("fold 2 training complete", "finished-script-line"),
    ("Training finished for epoch 7", "finished-script-line"),
    ("Training completed 45%", "finished-script-line"),
    # the pipeline's start line
    ("[INFO:swift] Start time of running main: 2026-11-21 01:00:00.000000", "finished-swift"),
    # a program's own warning about an override it could not apply
    ("WARNING could not override 'lr': not a float", "config-error"),
    # a launcher's wrapper of its child's exit says nothing about the program
    ("subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1.",
     "python-uncaught-exception"),
    ("torch.multiprocessing.spawn.ProcessRaisedException:", "python-uncaught-exception"),
    # optional probes of libraries the run does without (TensorFlow on a CPU node, an NVML probe)
    ("W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load dynamic library 'libcudart.so.11.0'; "
     "dlerror: libcudart.so.11.0: cannot open shared object file: No such file or directory", "abi-mismatch"),
    ("OSError: libnvidia-ml.so.1: cannot open shared object file: No such file or directory", "abi-mismatch"),
    # "preempted" of a CUDA stream / a scheduler's own priority words is no node taken back
    ("Xid (PCI:0000:3b:00): 45, pid=4113, Preemptive cleanup, due to previous errors", "platform-preempted"),
    # a crash in the driver's own library is no extension's bug
    ("kernel: python[4113]: segfault at 0 ip 00007f1c sp 00007ffd error 4 in libcuda.so.535.104.05[7f1c+200000]",
     "fused-kernel-crash"),
])
def test_source_line_near_miss(tmp_path: Path, line: str, not_rule: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line, "exiting"])
    assert d.rule_id != not_rule, (line, d.why_won)


def test_a_normal_exit_stands_for_exit_0_when_the_status_is_unknown(tmp_path: Path) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", "step 2 loss 2.20", WARNING_AT_EXIT], exit_code=None)
    assert (d.rule_id, str(d.decision)) == ("process-exited", "complete"), d.why_won
    assert "exit status is unknown" in d.hint


@pytest.mark.parametrize(("lines", "exit_code", "signal"), [
    # a known failed status: the warning prints at any interpreter exit
    (["step 1 loss 2.31", WARNING_AT_EXIT], 1, None),
    # an exception's traceback before it: the exception decides
    (["step 1 loss 2.31", "Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
      "KeyError: 'labels'", WARNING_AT_EXIT], None, None),
    # an error line of a failure rule (no traceback) in the log: no success
    (["step 1 loss 2.31", "[rank1]: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error, NCCL version 2.21.5",
      WARNING_AT_EXIT], None, None),
    # no exit line at all: an unknown status stays a failure
    (["step 1 loss 2.31", "step 2 loss 2.20"], None, None),
])
def test_what_is_no_normal_exit(tmp_path: Path, lines: list[str], exit_code: int | None, signal: int | None) -> None:
    d = diagnose(tmp_path, lines, exit_code=exit_code, signal=signal)
    assert str(d.decision) != "complete", d.why_won


def test_a_normal_exit_before_the_end_the_progress_names_is_a_stop(tmp_path: Path) -> None:
    d = diagnose(tmp_path, [" iteration      220/   10000 | consumed samples:  28160 | lm loss: 3.9E+00 |", WARNING_AT_EXIT], exit_code=None)
    assert (d.rule_id, str(d.decision)) == ("graceful-stop-unfinished", "reschedule"), d.why_won


def test_the_framework_line_names_the_finish_over_the_generic_script_line(tmp_path: Path) -> None:
    # the HF Trainer's line matches the generic pattern too: the specific rule is named
    d = diagnose(tmp_path, ["Training completed. Do not forget to share your model on huggingface.co/models =)",
                            "Segmentation fault (core dumped)"], exit_code=None, signal=11)
    assert (d.rule_id, str(d.decision)) == ("finished-hf-trainer", "complete"), d.why_won


@pytest.mark.parametrize(("rule_id", "readings"), [
    # a bare cancellation: a stop from outside (reschedule) or a person's (abort)
    ("cancelled", [Decision.ABORT, Decision.RESCHEDULE]),
    # a job verdict without the replica's log: transient or the replica's node
    ("platform-job-failed", [Decision.RETRY, Decision.RESCHEDULE]),
])
def test_ambiguous_rules_decide_as_the_cost_table_says(rule_id: str, readings: list[Decision]) -> None:
    rule = RULES.by_id(rule_id)
    assert rule is not None
    assert rule.decision is least_regret(readings)
