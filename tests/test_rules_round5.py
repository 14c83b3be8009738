"""Issue 20, fifth round: the classes blind5 showed the catalogue did not know, written
from their sources' message shapes (NCCL's enqueue / init / tuning / argcheck WARNs,
OmegaConf's error footer, argparse without its program name, the Hugging Face Hub's
refusals, a host shutting down under the training), each with a near miss; and an exit
0 whose log holds an error record and no end of training (the status hides a failure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_rules_tables import RULES, diagnose
from wrapper.classifier import classify_artifacts


@pytest.mark.parametrize(("line", "rule", "decision"), [
    # ---- NCCL refuses the job's own setup (the same on every restart) ----
    ("node7:2211:2211 [3] enqueue.cc:1961 NCCL WARN No algorithm/protocol available for function AllReduce "
     "with datatype ncclBfloat16. NCCL_ALGO was set to Ring.", "nccl-invalid-usage", "abort"),
    ("node7:2211:2211 [0] NCCL WARN Error : no algorithm/protocol available", "nccl-invalid-usage", "abort"),
    ("node7:2211:2290 [1] init.cc:988 NCCL WARN Mismatched NCCL version detected : rank 0 version 22105 "
     "rank 8 version 21903", "nccl-invalid-usage", "abort"),
    ("node7:2211:2290 [1] init.cc:1020 NCCL WARN Multiple Ranks are using the same GPU/Partition. Set "
     "NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this", "nccl-invalid-usage", "abort"),
    ("node7:2211:2211 [0] NCCL WARN Invalid config blocking attribute value -2147483648",
     "nccl-invalid-usage", "abort"),
    ("node7:2211:2211 [0] tuning.cc:95 NCCL WARN Unrecognized element token \"ringx\" when parsing \"ringx\"",
     "nccl-invalid-usage", "abort"),
    ("node7:2211:2211 [0] argcheck.cc:60 NCCL WARN Broadcast : invalid root 9 (root should be in the 0..8 range)",
     "nccl-invalid-usage", "abort"),
    ("node7:2211:2211 [0] bootstrap.cc:110 NCCL WARN Invalid NCCL_COMM_ID, please use format: <ipv4>:<port>",
     "nccl-invalid-usage", "abort"),
    # one node has fewer NICs than its peers: that node
    ("node7:2211:2290 [0] init.cc:1300 NCCL WARN Detected mixed local Net device counts across ranks "
     "(min 4, max 8).", "ib-hca-fault", "reschedule"),
    # ---- the configuration, in OmegaConf's and argparse's words ----
    ("omegaconf.errors.ConfigKeyError: Key 'warmup_ratio' not in 'OptimConfig'", "config-error", "abort"),
    # the footer OmegaConf puts under every error it raises (here a ValidationError's)
    ("    object_type=TrainerConf", "config-error", "abort"),
    ("error: unrecognized arguments: --deepspeed_config ds.json", "config-error", "abort"),
    # ---- the Hugging Face Hub refuses (gated, missing, a bad token) ----
    ("huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-abc)", "python-config-exception",
     "abort"),
    ("Cannot access gated repo for url https://huggingface.co/org/model-x/resolve/main/config.json.",
     "remote-request-refused", "abort"),
    ("Repository Not Found for url: https://huggingface.co/api/models/org/no-such-model/revision/main.",
     "remote-request-refused", "abort"),
    ("OSError: org/no-such-model is not a local folder and is not a valid model identifier listed on "
     "'https://huggingface.co/models'", "remote-request-refused", "abort"),
    ("requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://api.example.org/v1/runs",
     "remote-request-refused", "abort"),
    # ---- the host shuts down under the training (a cloud preemption's ACPI soft-off) ----
    ("Mar 02 10:11:12 gpu-vm-3 systemd-logind[812]: Power key pressed.", "platform-preempted", "reschedule"),
    ("Mar 02 10:11:12Z gpu-vm-3 systemd-logind System is powering down.", "platform-preempted", "reschedule"),
    ("Broadcast message from root@gpu-vm-3: The system will power off now!", "platform-preempted", "reschedule"),
    # ---- Ray's older monitor, a node it stopped hearing ----
    ("The node with client ID 0a1b2c has been marked dead because the monitor has missed too many heartbeats "
     "from it.", "platform-node-lost", "reschedule"),
    # ---- the image the job names cannot be pulled (kubelet's event, docker's words) ----
    ('  Warning  Failed  8s  kubelet  Failed to pull image "registry.example.org/team/trainer:v9": rpc error: '
     'code = NotFound desc = failed to pull and unpack image "registry.example.org/team/trainer:v9": failed to '
     'resolve reference "registry.example.org/team/trainer:v9": registry.example.org/team/trainer:v9: not found',
     "image-not-found", "abort"),
    ("docker: Error response from daemon: manifest for team/trainer:v9 not found: manifest unknown: manifest unknown.",
     "image-not-found", "abort"),
    # ... a registry's rate limit lifts with time
    ('  Warning  Failed  8s  kubelet  Failed to pull image "trainer:v9": toomanyrequests: You have reached your '
     'pull rate limit. You may increase the limit by authenticating and upgrading', "remote-service-unavailable",
     "retry"),
    # the expandable-segments allocator's driver call out of memory: an OOM like the others
    ("RuntimeError: CUDA driver error: out of memory", "cuda-oom", "abort"),
    # ---- a worker gone, its cause not in the log ----
    ("[rank0]: RuntimeError: DataLoader worker (pid(s) 40211) exited unexpectedly", "signal-death-in-log", "retry"),
    ("W1125 10:11:12.345000 1403 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 44 "
     "closing signal SIGTERM", "child-process-failed", "retry"),
])
def test_source_line_decides(tmp_path: Path, line: str, rule: str, decision: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line, "exiting"])
    assert (d.rule_id, str(d.decision)) == (rule, decision), d.why_won


@pytest.mark.parametrize(("line", "not_rule"), [
    # NCCL's informational lines about algorithms and versions
    ("node7:2211:2211 [0] NCCL INFO NCCL_ALGO set by environment to Ring", "nccl-invalid-usage"),
    ("node7:2211:2211 [0] NCCL INFO NCCL version 2.21.5+cuda12.4", "nccl-invalid-usage"),
    # a message that mentions a key, not OmegaConf's error
    ("Key 'lr' found in config, using 0.001", "config-error"),
    ("the error: field is optional in this schema", "config-error"),
    # the Hub's 5xx is the service's, not a refusal
    ("requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: https://huggingface.co/api",
     "remote-request-refused"),
    # a program's own word "power" / "system" is no shutdown
    ("Power key pressed in the simulator: episode 12 reset", "platform-preempted"),
    ("The system will power off the fans when idle", "platform-preempted"),
    # a registry that is slow or unreachable is no refusal
    ('  Warning  Failed  8s  kubelet  Failed to pull image "trainer:v9": rpc error: code = Unknown desc = failed to '
     'pull and unpack image: dial tcp 10.0.0.5:443: i/o timeout', "image-not-found"),
])
def test_source_line_near_miss(tmp_path: Path, line: str, not_rule: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line, "exiting"])
    assert d.rule_id != not_rule, (line, d.why_won)


@pytest.mark.parametrize("record", [
    "ERROR:__main__:training failed: dataset split 'validation' is empty",
    "2026-11-24 10:11:12,345 - trainer - ERROR - could not build the model",
    "ERROR    | 2026-11-24 10:11:12 | app.trainers.common:wrapper:210 - unsupported model type",
    "2026-11-24 10:11:12.345 | ERROR    | train:main:88 - stopping: no data",
    "[2026-11-24 10:11:12,345] [ERROR] [engine.py:120:setup] optimizer state missing",
])
def test_an_error_record_at_exit_0_without_an_end_is_no_success(tmp_path: Path, record: str) -> None:
    d = diagnose(tmp_path, ["loading data", record, "job id: 812"], exit_code=0)
    assert (d.rule_id, str(d.decision)) == ("error-logged-at-exit-0", "retry"), d.why_won


def test_an_error_record_does_not_outrank_the_end_of_training(tmp_path: Path) -> None:
    d = diagnose(tmp_path, ["step 100 loss 1.01", "ERROR:wandb:upload of media failed",
                            "Training completed in 5.2 hours"], exit_code=0)
    assert str(d.decision) == "complete", d.why_won


@pytest.mark.parametrize("line", [
    # glog-style E lines TensorFlow / XLA print at every start
    "2026-11-24 10:11:12.345: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:9261] Unable to register "
    "cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been registered",
    # pip's notes in a job that installs first
    "ERROR: pip's dependency resolver does not currently take into account all the packages that are installed.",
    # the word in a message at another level
    "2026-11-24 10:11:12,345 - trainer - INFO - ERROR rate on validation: 0.12",
])
def test_what_is_no_error_record_at_exit_0(tmp_path: Path, line: str) -> None:
    d = diagnose(tmp_path, ["loading data", line, "done"], exit_code=0)
    assert str(d.decision) == "complete", d.why_won


def test_an_error_record_at_a_failing_exit_is_not_what_decides(tmp_path: Path) -> None:
    d = diagnose(tmp_path, ["ERROR:__main__:loss is nan", "Traceback (most recent call last):",
                            "KeyError: 'labels'"], exit_code=1)
    assert d.rule_id != "error-logged-at-exit-0", d.why_won


def test_a_launcher_closing_its_workers_is_no_normal_exit(tmp_path: Path) -> None:
    # status unknown, the log cut above the traceback's header; the exit-time warning
    # would stand for exit 0, but the DataLoader's worker died and torchelastic closed
    # the other workers: a failure, not a finish
    d = diagnose(tmp_path, [
        '[rank0]:   File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1144, '
        'in _try_get_data',
        "[rank0]: RuntimeError: DataLoader worker (pid(s) 40211) exited unexpectedly",
        "[rank0]:[W1125 10:11:12.1 ProcessGroupNCCL.cpp:1168] Warning: WARNING: process group has NOT been "
        "destroyed before we destruct ProcessGroupNCCL. On normal program exit, the application should call "
        "destroy_process_group to ensure that any pending NCCL operations have finished in this process.",
        "W1125 10:11:13.000000 1403 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 45 "
        "closing signal SIGTERM"], exit_code=None)
    assert str(d.decision) == "retry", d.why_won


PG_EXIT_WARNING = ("[rank0]:[W1125 10:11:12.1 ProcessGroupNCCL.cpp:1168] Warning: WARNING: process group has NOT "
                   "been destroyed before we destruct ProcessGroupNCCL. On normal program exit, the application "
                   "should call destroy_process_group to ensure that any pending NCCL operations have finished.")


@pytest.mark.parametrize("exception", [
    "[rank0]: RuntimeError: the sampler returned no indices for rank 3",
    "Exception: batch 7 is empty",
    "[rank1]: OSError: unexpected end of data in shard 12",
])
def test_a_generic_exception_before_the_exit_line_is_no_normal_exit(tmp_path: Path, exception: str) -> None:
    # the exit-time warning is printed at any exit, the exception's too
    d = diagnose(tmp_path, ["step 10 loss 1.0", exception, PG_EXIT_WARNING], exit_code=None)
    assert str(d.decision) == "retry", d.why_won
    # ... nor is a crash after both a teardown crash
    d = diagnose(tmp_path, ["step 10 loss 1.0", exception, PG_EXIT_WARNING], exit_code=None, signal=11)
    assert str(d.decision) != "complete", d.why_won


def test_the_exit_line_alone_is_still_a_normal_exit(tmp_path: Path) -> None:
    d = diagnose(tmp_path, ["step 10 loss 1.0", PG_EXIT_WARNING], exit_code=None)
    assert str(d.decision) == "complete", d.why_won


# Run in a child process: the DataLoader installs a SIGCHLD handler in the process that
# iterates it, and a dead worker left registered there would raise in whatever test the
# same pytest worker runs next when any of its subprocesses exits.
_KILLED_WORKER = """
import os, signal, torch
class KillsItsWorker(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, index):
        if index == 5:
            os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does
        return index
for _ in torch.utils.data.DataLoader(KillsItsWorker(), batch_size=2, num_workers=1):
    pass
"""


def test_a_real_dataloader_worker_killed_is_a_signal_death(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import subprocess
    import sys
    run = subprocess.run([sys.executable, "-c", _KILLED_WORKER], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode != 0, run.stderr[-2000:]
    lines = run.stderr.splitlines()  # PyTorch's own words for the dead worker
    d = diagnose(tmp_path, ["step 3 loss 1.0", *lines])
    # What the main process prints depends on where the worker's death finds it (seen in
    # 25 runs under load): the SIGCHLD handler's "is killed by signal", chained after the
    # worker queue's ConnectionResetError or a bare EOFError (its pipe's peer is gone),
    # sometimes with "exited unexpectedly", sometimes inside an "Exception ignored" block
    # at interpreter shutdown. Whichever it is, a worker's death is retried: never an
    # abort (the bare EOFError was one before it was read as an input cut short).
    assert str(d.decision) == "retry", (lines[-1], d.why_won)


def test_an_eoferror_decides_the_same_from_an_error_file_as_from_the_log(tmp_path: Path) -> None:
    # the python table reads EOFError as transient; the torchelastic error file's
    # exception type must be read the same way (one home for the class, not two answers)
    import json
    error_file = tmp_path / "error.json"
    error_file.write_text(json.dumps({"message": {"message": "EOFError: ", "extraInfo": {
        "py_callstack": "Traceback (most recent call last):\nEOFError", "timestamp": "1700000000"}},
        "errorCode": 1}), encoding="utf-8")
    log = tmp_path / "train.log"
    log.write_text("step 3 loss 1.0\n", encoding="utf-8")
    from_file = classify_artifacts(logs=[log], error_files=[error_file], exit_code=1, signal=None, rules=RULES)
    from_log = diagnose(tmp_path, ["step 3 loss 1.0", "EOFError"])
    assert str(from_file.decision) == str(from_log.decision) == "retry", (from_file.why_won, from_log.why_won)
