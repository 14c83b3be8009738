"""Issue 20, second round: the families a blind set of real logs found uncovered, each
rule checked on lines written from the message shapes of the source that raises them
(cited in the catalogue), with a near miss for each, and the success evidence that
outranks a teardown failure next to what must NOT count as success."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_rules_tables import diagnose


@pytest.mark.parametrize(("line", "rule", "decision"), [
    # ---- node loss / preemption as the platform reports it ----
    # slurmstepd req.c, SIG_REQUEUED
    ("slurmstepd: error: *** JOB 77120 ON gpu-a-12 CANCELLED AT 2026-03-02T11:40:05 DUE TO JOB REQUEUE ***", "preempted", "reschedule"),
    # submitit job_environment.py, its handler of the scheduler's warning signal
    ("submitit WARNING (2026-03-02 11:40:04,120) - Caught signal SIGUSR1 on gpu-a-12: this job is preempted.", "preempted", "reschedule"),
    # kubeflow mpi-operator: the Failed condition when a worker pod was evicted
    ("    reason: MPIJobEvicted", "platform-preempted", "reschedule"),
    ("    message: 3/32 workers are evicted", "platform-preempted", "reschedule"),
    # Kubernetes DisruptionTarget reasons
    ("    reason: EvictionByEvictionAPI", "platform-preempted", "reschedule"),
    ("    reason: TerminationByKubelet", "platform-preempted", "reschedule"),
    # AWS Batch statusReason
    ("statusReason: Host EC2 (instance i-0a1b2c3d4e5f67890) terminated.", "platform-preempted", "reschedule"),
    # Ray GCS death cause (gcs_actor_manager.cc) in the "is dead" wording
    ("ray.exceptions.ActorDiedError: The actor is dead because its node has died. Node Id: 1f2e3d4c5b6a", "platform-node-lost", "reschedule"),
    # the node lifecycle controller's event on a pod of an unresponsive node
    ("  Warning  NodeNotReady  4m12s  node-controller  Node is not ready", "platform-node-lost", "reschedule"),
    # TensorFlow TPU ShutdownHook
    ("INFO:tensorflow:ShutdownHook: lame workers found: HeartbeatManager(/job:worker/replica:0/task:3/device:CPU:0)", "platform-node-lost", "reschedule"),
    # ---- GPU / driver / fabric state ----
    # any WARN of NCCL's NVLS transport, whatever CUDA error it carries
    ("gpu-b-3:5512:5600 [4] transport/nvls.cc:310 NCCL WARN Cuda failure 'invalid argument'", "gpu-driver-fabric-fault", "reschedule"),
    # the multicast bind failure; its CUDA error reads 'out of memory' (no OOM of the model's)
    ("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 4194304 : CUDA error 2 'out of memory'.", "gpu-driver-fabric-fault", "reschedule"),
    # CUDA init failing with cudaErrorUnknown: c10's warning, and the old THC init
    ("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
     "before calling NumCudaDevices() that might have already set an error? Error 999: unknown error", "gpu-driver-fabric-fault", "reschedule"),
    ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=50 error=30 : unknown error", "gpu-driver-fabric-fault", "reschedule"),
    # the container runtime's GPU hook cannot reach the driver
    ("OCI runtime create failed: runc create failed: unable to start container process: error during container init: "
     "error running prestart hook #0: exit status 1, stdout: , stderr: nvidia-container-cli: initialization error: "
     "nvml error: driver/library version mismatch: unknown", "gpu-driver-fabric-fault", "reschedule"),
    # ---- deterministic configuration ----
    # misc/socket.cc: an address never filled in (no interface matched NCCL_SOCKET_IFNAME)
    ("ncclSocketConnect: connecting to address  with family 0 is neither AF_INET(2) nor AF_INET6(10)", "nccl-invalid-usage", "abort"),
    # graph/rings.cc: the ranks disagree about the topology
    ("gpu-c-1:881:930 [0] graph/rings.cc:40 NCCL WARN Error : ring 2 does not loop back to start (9 != 0)", "nccl-invalid-usage", "abort"),
    ("gpu-c-1:881:930 [0] graph/rings.cc:52 NCCL WARN Error : ring 1 does not contain rank 4", "nccl-invalid-usage", "abort"),
    # NCCL's shm transport: /dev/shm too small, as c10d's "Last error:" quotes it (ninth round)
    ("Error while creating shared memory segment /dev/shm/nccl-CsYXMW (size 9637888)", "nccl-shm-segment", "retry"),
    ("Error while creating shared memory segment /dev/shm/nccl-CsYXMW (size 9637888), error: No space left on device (28)",
     "nccl-invalid-usage", "abort"),
    # ---- a NaN loss a framework stops on (ninth round) ----
    # TensorFlow's NanTensorHook, the CheckNumerics op TF-slim puts on the loss
    ("ERROR:tensorflow:Model diverged with loss = NaN.", "loss-nan", "abort"),
    ("INFO:tensorflow:Error reported to Coordinator: <class 'tensorflow.python.framework.errors_impl.InvalidArgumentError'>, "
     "LossTensor is inf or nan. : Tensor had NaN values", "loss-nan", "abort"),
    # Megatron's rerun state machine, its message cut where a pasted excerpt often ends
    ("ERROR:megatron.core.rerun_state_machine:Rank 3, node n1, device 3, iteration #3: First rerun: unexpected result is "
     "reproducible within the tolerance (nan = nan). Need to rerun on a different GPU to verify cor", "megatron-rerun-16", "reschedule"),
])
def test_family_line_decides(tmp_path: Path, line: str, rule: str, decision: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line, "exiting"])
    assert (d.rule_id, d.decision) == (rule, decision), d.why_won


@pytest.mark.parametrize(("line", "not_rule"), [
    # an unknown error mid-run (not at init) stays the ambiguous CUDA rule: retry first
    ("RuntimeError: cuda runtime error (30) : unknown error at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510", "gpu-driver-fabric-fault"),
    ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=50 error=2 : out of memory", "gpu-driver-fabric-fault"),
    # NCCL's INFO line naming the NVLS transport is no failure
    ("gpu-b-3:5512:5600 [4] NCCL INFO transport/nvls.cc:512 NVLS comm 0x55 headRank 0 nHeads 4", "gpu-driver-fabric-fault"),
    # an MPIJob that is running, a job condition that names no eviction
    ("    reason: MPIJobRunning", "platform-preempted"),
    # a plain cancel (no reason) is a person's decision, not a requeue / preemption
    ("slurmstepd: error: *** JOB 77120 ON gpu-a-12 CANCELLED AT 2026-03-02T11:40:05 ***", "preempted"),
    # every pod's default tolerations name the taints: no node loss
    ("Tolerations:  node.kubernetes.io/not-ready:NoExecute op=Exists for 300s", "platform-node-lost"),
    # an actor killed on purpose: its node is fine
    ("The actor is dead because it was killed by `ray.kill`.", "platform-node-lost"),
    # Megatron's NaN in the gradient norm is what its rerun state machine then judges (a
    # GPU's silent data corruption or the model's NaN): no abort on that line alone
    ("Unexpected result inf (message='found Inf in local grad norm for bucket #6 in backward pass before data-parallel "
     "communication collective')", "loss-nan"),
])
def test_family_near_miss(tmp_path: Path, line: str, not_rule: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line, "exiting"])
    assert d.rule_id != not_rule, (line, d.why_won)


@pytest.mark.parametrize(("lines", "signal", "rule"), [
    # Megatron's --do-test pass runs only after train() returned
    ([" validation loss at iteration 5000 on test set | lm loss value: 1.981E+00 | lm loss PPL: 7.25E+00 | ",
      "[rank0]:[W1121 04:00:01.1 ProcessGroupNCCL.cpp:1250] Warning: WARNING: destroy_process_group() was not called before program exit",
      "pure virtual method called", "terminate called without an active exception"], 6, "finished-megatron"),
    # HF Trainer's closing speed metrics, then a crash at exit
    (["{'train_runtime': 812.33, 'train_samples_per_second': 12.1, 'train_steps_per_second': 0.76, 'train_loss': 0.93, 'epoch': 2.0}",
      "Segmentation fault (core dumped)"], 11, "finished-hf-trainer"),
    # the example scripts' log_metrics("train", ...)
    (["***** train metrics *****", "  epoch                    =        3.0", "  train_runtime            = 2:00:15.42",
      "Segmentation fault (core dumped)"], 11, "finished-hf-trainer"),
    # fairseq's end of the epoch loop
    (["2026-11-21 04:00:00 | INFO | fairseq_cli.train | done training in 86342.7 seconds",
      "RuntimeError: NCCL communicator was aborted on rank 3."], None, "finished-fairseq"),
])
def test_success_outranks_a_teardown_failure(tmp_path: Path, lines: list[str], signal: int | None,
                                             rule: str) -> None:
    d = diagnose(tmp_path, ["step 100 loss 2.31", *lines], exit_code=None if signal else 1, signal=signal)
    assert (d.rule_id, str(d.decision)) == (rule, "complete"), d.why_won
    assert d.finished_by


@pytest.mark.parametrize("lines", [
    # validation DURING training is no end of training
    [" validation loss at iteration 2000 on validation set | lm loss value: 2.310E+00 |",
     "pure virtual method called"],
    # a running Trainer's per-step log dict has no train_runtime
    ["{'loss': 1.2031, 'grad_norm': 0.88, 'learning_rate': 1.9e-05, 'epoch': 0.41}",
     "Segmentation fault (core dumped)"],
    # eval metrics are printed mid-training too
    ["***** eval metrics *****", "  eval_loss = 1.93", "Segmentation fault (core dumped)"],
])
def test_what_is_not_success_stays_a_failure(tmp_path: Path, lines: list[str]) -> None:
    d = diagnose(tmp_path, ["step 100 loss 2.31", *lines], exit_code=None, signal=11)
    assert str(d.decision) != "complete" and not d.finished_by, d.why_won


@pytest.mark.parametrize(("lines", "rule"), [
    # Megatron saves after its "[after training is done]" line: a full volume there
    (["[after training is done] datetime: 2026-11-21 03:59:08 ",
      "saving checkpoint at iteration   10000 to /ckpt/run-7",
      "OSError: [Errno 28] No space left on device: '/ckpt/run-7/iter_0010000'"], "storage-full"),
    # the HF Trainer's loop ended, then pushing the model to the Hub failed
    (["{'train_runtime': 812.33, 'train_samples_per_second': 12.1, 'train_steps_per_second': 0.76, 'epoch': 2.0}",
      "huggingface_hub.errors.HfHubHTTPError: 503 Server Error: Service Unavailable for url: "
      "https://huggingface.co/api/models/org/model/commit/main"], "remote-service-unavailable"),
])
def test_a_failed_final_save_or_upload_after_the_finish_line_is_no_success(
        tmp_path: Path, lines: list[str], rule: str) -> None:
    d = diagnose(tmp_path, ["step 100 loss 2.31", *lines], exit_code=1)
    assert (d.rule_id, str(d.decision)) == (rule, "retry"), d.why_won
    assert "final save" in d.hint


@pytest.mark.parametrize("line", [
    "[exiting program after 230.0 minutes] datetime: 2026-11-21 03:50:00 ",
    "[exiting program at iteration 4500] datetime: 2026-11-21 03:50:00 ",
    "Time limit reached. Elapsed time is 11:59:58. Signaling Trainer to stop.",
])
def test_a_budget_exit_at_exit_0_is_a_stop_not_the_end(tmp_path: Path, line: str) -> None:
    d = diagnose(tmp_path, ["step 100 loss 2.31", line], exit_code=0)
    assert (d.rule_id, str(d.decision)) == ("preempted", "reschedule"), d.why_won


def test_the_budget_words_mid_line_in_a_config_dump_are_no_stop(tmp_path: Path) -> None:
    d = diagnose(tmp_path, ["args: exit_duration_in_mins=230 exit_interval=None", "step 100 loss 2.31"],
                 exit_code=0)
    assert (d.rule_id, str(d.decision)) == ("complete", "complete"), d.why_won


@pytest.mark.parametrize(("line", "rule", "decision"), [
    # status-code wrappers say nothing by themselves: an NCCL failure inside an XLA
    # collective, a closed socket under TensorFlow -> no abort on a first occurrence
    ("jax.errors.JaxRuntimeError: INTERNAL: Failed to execute XLA Runtime executable: run time error: custom call "
     "'xla.gpu.all_reduce' failed: NCCL operation ncclAllReduce failed: unhandled cuda error", "unknown-failure", "retry"),
    ("tensorflow.python.framework.errors_impl.UnavailableError: Socket closed", "python-transient-error", "retry"),
    ("tensorflow.python.framework.errors_impl.DeadlineExceededError: Deadline Exceeded", "unknown-failure", "retry"),
    # ... while the out-of-memory status is the OOM rule's, and a class named for a wrong argument aborts
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8589934592 bytes.",
     "cuda-oom", "abort"),
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with shape[8,4096,4096]",
     "cuda-oom", "abort"),
    ("tensorflow.python.framework.errors_impl.InvalidArgumentError: Incompatible shapes: [8,128] vs. [8,64]",
     "python-config-exception", "abort"),
])
def test_status_code_wrappers_decide_on_their_status(tmp_path: Path, line: str, rule: str, decision: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line])
    assert (d.rule_id, str(d.decision)) == (rule, decision), d.why_won


@pytest.mark.parametrize("line", [
    "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host hub.example.org:443 ssl:default [Connection reset by peer]",
    "google.auth.exceptions.TransportError: HTTPSConnectionPool(host='oauth2.example.org', port=443): Max retries exceeded",
    "ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.",
    "pyarrow.lib.ArrowIOError: Unexpected end of stream",
    "[rank3]: wandb.errors.CommError: Network error (ConnectionError), entering retry loop.",
])
def test_a_library_class_named_for_a_network_or_timeout_failure_retries(tmp_path: Path, line: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line])
    assert (d.rule_id, str(d.decision)) == ("python-transient-error", "retry"), d.why_won


@pytest.mark.parametrize(("line", "rule"), [
    # a library's own class named for something else still aborts; the generic IOError
    # (an alias of OSError) decides nothing by its name
    ("omegaconf.errors.ConfigAttributeError: Missing key optimizer", "python-config-exception"),
    ("IOError: [Errno 2] No such file or directory: 'data/train.json'", "unknown-failure"),
    # a frame's source line naming the class is no uncaught exception
    ("    raise ClientConnectorError(req.connection_key, exc) from exc", "unknown-failure"),
])
def test_the_transient_class_names_stay_narrow(tmp_path: Path, line: str, rule: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line])
    assert d.rule_id == rule, d.why_won


@pytest.mark.parametrize("line", [
    "Killed",
    "Bus error (core dumped)",
    "srun: error: gpu-a-07: tasks 0-3: Killed",
    "E1121 03:59:07.000000 77 torch/distributed/elastic/multiprocessing/api.py:881] failed (exitcode: -11) local_rank: 2 (pid: 4120) of binary: /usr/bin/python3",
])
def test_a_signal_death_in_the_log_is_no_success_at_exit_0(tmp_path: Path, line: str) -> None:
    d = diagnose(tmp_path, ["step 100 loss 2.31", line, "done"], exit_code=0)
    # (torchelastic's line also names the signal as the root cause's status: the status rule)
    assert str(d.decision) == "retry" and d.rule_id in {"signal-death-in-log", "crashed-by-signal"}, d.why_won


@pytest.mark.parametrize("line", [
    "the job was Killed by the user on purpose",  # words, not the shell's report
    "E1121 03:59:07.000000 77 api.py:881] failed (exitcode: 1) local_rank: 2 (pid: 4120)",  # no signal
])
def test_signal_words_elsewhere_are_no_death_report(tmp_path: Path, line: str) -> None:
    d = diagnose(tmp_path, ["step 100 loss 2.31", line, "done"], exit_code=0)
    assert d.rule_id != "signal-death-in-log", d.why_won


def test_megatron_rerun_verdict_decides_after_the_nan_it_judged(tmp_path: Path) -> None:
    # the NaN line comes first, the state machine's verdict after it: the verdict decides
    lines = ["ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 3 at iteration #3 invocation #2 "
             "(message='found NaN in local grad norm for bucket #0 in backward pass before data-parallel communication collective')",
             "WARNING:megatron.core.rerun_state_machine:First rerun: unexpected result is not reproducible within the tolerance (nan != 1.2)",
             "WARNING:megatron.core.rerun_state_machine:Possible transient error!"]
    d = diagnose(tmp_path, lines, exit_code=None)
    assert (d.rule_id, str(d.decision)) == ("megatron-rerun-17-transient", "retry"), d.why_won
