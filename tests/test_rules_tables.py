"""Rules derived from authoritative lists (the catalogue's tables), root cause over
cascade, and the guarantee that a hardware fault is never retried twice on one node."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from tests.test_policy import diagnosis  # the policy tests' Diagnosis builder
from wrapper.classifier import classify_artifacts
from wrapper.decision import Decision
from wrapper.history import History, _with_outcome
from wrapper.policy import Budgets, decide
from wrapper.classifier.rules import RulesError, load_rule_file, load_rules

RULES = load_rules()
DOCS = Path(__file__).resolve().parent.parent / "docs" / "rules.md"


def diagnose(tmp_path: Path, lines: list[str], exit_code: int | None = 1, signal: int | None = None):
    log = tmp_path / "train.log"
    log.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return classify_artifacts(logs=[log], error_files=[], exit_code=exit_code, signal=signal, rules=RULES)


def test_every_catalogue_rule_and_table_cites_its_source() -> None:
    uncited = sorted(rule.id for rule in RULES.rules if not rule.cites)
    assert uncited == ["unknown-failure"]  # resched's own fallback has no outside source
    for rule in RULES.rules:
        assert all(cite.startswith("https://") for cite in rule.cites), rule.id
    assert {t.name for t in RULES.tables} >= {"xid", "cuda", "nccl", "nccl_warn", "ibverbs", "python",
                                              "schedulers", "host"}
    for table in RULES.tables:
        assert table.source.startswith("https://") and table.list.strip(), table.name


def test_docs_map_every_table_and_every_table_rule() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for table in RULES.tables:
        assert f"(`{table.name}`)" in text, f"docs/rules.md does not map table {table.name}"
    table_rules = {r.id for r in RULES.rules for c in r.cites if c in {t.source for t in RULES.tables}}
    missing = sorted(rule_id for rule_id in table_rules if f"`{rule_id}`" not in text)
    assert missing == []


def test_docs_list_the_xid_classes_as_the_table_holds_them() -> None:
    """docs/rules.md's row for the Xid table names, per class, exactly the table's Xids
    (it once kept a class list from before the rows were checked against the catalog)."""
    row = next(line for line in DOCS.read_text(encoding="utf-8").splitlines()
               if line.startswith("| NVIDIA Xid catalog (`xid`)"))
    table = next(t for t in RULES.tables if t.name == "xid")

    def numbers(text: str) -> set[int]:
        out: set[int] = set()
        for low, high in re.findall(r"\b(\d+)(?:-(\d+))?\b", re.sub(r"\([^)]*\)", "", text)):
            out.update(range(int(low), int(high or low) + 1))
        return out

    listed = {name: numbers(body) for name, body in re.findall(r"\(`([\w-]+)`(?:, `[\w-]+`)?: (.*?)\) ->", row)}
    want = {klass: {int(r.key) for r in table.rows if r.klass == klass} for klass in table.classes()}
    # reset-gpu and drain share one list in the row: both reschedule
    assert listed["reset-gpu"] == want["reset-gpu"] | want["drain"]
    assert listed["app"] == want["app"]
    assert listed["info"] == want["info"]


@pytest.mark.parametrize(("line", "rule", "decision"), [
    # NVLink Xids, in the driver's own format, and as the cause a later Xid 45 names
    ("kernel: NVRM: Xid (PCI:0000:dc:00): 149, pid=1, name=python3, NETIR_LINK_EVT Fatal error", "gpu-hardware-fault", "reschedule"),
    ("NVRM: Xid (PCI:0000:ba:00): 45, pid=1, name=python3, Ch 00000002 caused by previous Xid 145", "gpu-hardware-fault", "reschedule"),
    ("NVRM: Xid (0000:01:00): 144, NVLINK: SAW error", "gpu-hardware-fault", "reschedule"),
    ("NVRM: Xid (PCI:0000:3b:00): 31, pid=7, Ch 00000008, intr 10000000. MMU Fault", "cuda-illegal-memory-access", "retry"),
    # a page retired / a row marked for remapping: in effect only after a reset (the taxonomy's 63)
    ("NVRM: Xid (PCI:0000:65:00): 63, pid='N/A', Row Remapper: New row marked for remapping, reset gpu to activate.", "gpu-hardware-fault", "reschedule"),
    ("RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable", "gpu-hardware-fault", "reschedule"),
    # the Kubernetes device plugin's health check takes a GPU out of service (both wordings);
    # "XidCriticalError:" is no Python exception class
    ("2020/08/10 19:09:42 XidCriticalError: Xid=69 on Device=GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8, the device will go unhealthy.", "gpu-hardware-fault", "reschedule"),
    ("I1127 10:02:11.000000       1 health.go:152] XidCriticalError: Xid=79 on Device=GPU-7540a9b3; marking device as unhealthy.", "gpu-hardware-fault", "reschedule"),
    ("2020/08/10 19:09:42 'nvidia.com/gpu' device marked unhealthy: GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8", "gpu-hardware-fault", "reschedule"),
    # no GPU / driver visible to the process: torch.cuda's own assertion, not a user error
    ("AssertionError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver", "gpu-driver-fabric-fault", "reschedule"),
    ("RuntimeError: No CUDA GPUs are available", "gpu-driver-fabric-fault", "reschedule"),
    ("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable", "gpu-hardware-fault", "reschedule"),
    ("THCudaCheck FAIL file=THCStorage.cu line=66 error=46 : all CUDA-capable devices are busy or unavailable", "gpu-hardware-fault", "reschedule"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "cuda-program-error", "abort"),
    ("Error no kernel image is available for execution on the device at line 167 in file ops.cu", "cuda-program-error", "abort"),
    ("RuntimeError: CUDA error: device-side assert triggered", "cuda-program-error", "abort"),
    # cuBLAS statuses: a call the library does not support fails the same way again; a
    # launch failure is the device's (or an earlier fault's), as an illegal address
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmStridedBatchedExFix(handle, opa, opb, m, n, k, alpha, a, CUDA_R_16BF, lda)`", "cuda-program-error", "abort"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_INVALID_VALUE when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16F, lda)`", "cuda-program-error", "abort"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`", "cuda-illegal-memory-access", "retry"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`", "cuda-illegal-memory-access", "retry"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "cuda-oom", "abort"),
    ("h:1:2 [0] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'", "cuda-oom", "abort"),
    ("RuntimeError: NCCL error: unhandled system error, NCCL version 2.7.8", "nccl-error", "retry"),
    ("ncclInternalError: Internal check failed.", "nccl-error", "retry"),
    ("h:1:2 [0] init.cc:497 NCCL WARN Duplicate GPU detected : rank 4 and rank 0 both on CUDA device 1000", "nccl-invalid-usage", "abort"),
    ("h:1:2 [0] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)", "nccl-shm-segment", "retry"),
    ("h:1:2 [0] NCCL WARN Call to shm_open failed : Permission denied", "nccl-shm-segment", "retry"),
    ("h:1:2 [0] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888), error: No space "
     "left on device (28)", "nccl-invalid-usage", "abort"),
    ("h:1:2 [0] NCCL INFO NET/IB : mlx5_2:1 Got async event : port error", "ib-hca-fault", "reschedule"),
    ("h:1:2 [0] NCCL WARN NET/IB : mlx5_0:1 Got async event : local catastrophic error", "ib-hca-fault", "reschedule"),
    ("NET/IB : Got completion from peer 10.0.0.2<1> with status=RNR retry counter exceeded(13)", "nccl-error", "retry"),
    ("FloatingPointError: Loss became infinite or NaN at iteration=0!", "loss-nan", "abort"),
    ("[rank0]: RuntimeError: loss is nan, stopping training", "loss-nan", "abort"),
    ("IndexError: list index out of range", "python-user-error", "abort"),
    ("15: [rank15]: AssertionError: num_layers should be divisible by pipeline_model_parallel_size", "python-user-error", "abort"),
    ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x512 and 256x10)", "torch-program-error", "abort"),
    ("salloc: error: Node failure on worker-1", "scheduler-node-failure", "reschedule"),
    ("NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062)", "gpu-hardware-fault", "reschedule"),
    ("[rank3]: UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff", "python-user-error", "abort"),
    ("ConnectionResetError: [Errno 104] Connection reset by peer", "python-transient-error", "retry"),
    ("omegaconf.errors.ConfigAttributeError: Missing key train", "python-config-exception", "abort"),
    ("slurmstepd: error: *** JOB 1449736 ON phoenix-07 CANCELLED AT 2023-12-03T12:47:09 DUE TO TIME LIMIT ***", "preempted", "reschedule"),
    ("srun: error: Node failure on node017", "scheduler-node-failure", "reschedule"),
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=12.0. Some of the step tasks have been OOM Killed.", "host-oom-kill", "retry"),
    ("pcieport 0000:00:03.1: AER: Uncorrected (Fatal) error received: 0000:41:00.0", "gpu-hardware-fault", "reschedule"),
    ("Unable to determine the device handle for GPU0000:41:00.0: Unknown Error", "gpu-hardware-fault", "reschedule"),
    ("NVRM: GPU at PCI:0000:41:00: GPU-1234 has fallen off the bus.", "gpu-hardware-fault", "reschedule"),
])
def test_one_line_from_each_list_decides(tmp_path: Path, line: str, rule: str, decision: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line, "exiting"])
    assert (d.rule_id, d.decision) == (rule, decision), d.why_won
    assert any(line[:60] in e.text for e in d.evidence)


@pytest.mark.parametrize("line", [
    "[default1]: nvidia-smi: GPU 1: volatile ECC errors: 0, last Xid 13 cleared",  # a monitor, not an event
    "UserWarning: passing a str will raise ValueError: in a future release",  # mid-line
    "loss: 2.31 | nan_count: 0 | inf_checks: on",
    "AER: Corrected error received: 0000:00:1c.0",  # corrected: not a cause
    "NVRM: Xid (PCI:0000:01:00): 45, pid=1, Ch 00000002",  # preemptive cleanup, no cause named
    "NET/IB : Got async event : port active",
    "the run printed 'invalid argument' in a help text",
    "RuntimeError: CUDA error code 500: named symbol not found",  # a CUDA code, no HTTP status
])
def test_near_misses_stay_unknown(tmp_path: Path, line: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", line, "exiting"])
    assert d.rule_id == "unknown-failure", (line, d.why_won)


def test_longest_key_wins_inside_a_table(tmp_path: Path) -> None:
    # 14x are NVLink Xids; the shorter keys (13, 43...) must not swallow them
    d = diagnose(tmp_path, ["NVRM: Xid (PCI:0000:dc:00): 148, NVLPW_CTRL error"])
    assert d.rule_id == "gpu-hardware-fault"


def test_root_cause_is_the_same_whatever_order_ranks_printed_in(tmp_path: Path) -> None:
    crash = [
        "[rank3]: KeyError: 'data_path'",
        "[rank0]: RuntimeError: [pair.cc:534] Connection closed by peer [10.0.0.17]:47021",
        "[rank1]: [E1121 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout",
        "[rank2]: RuntimeError: [pair.cc:534] Connection reset by peer [10.0.0.17]:47021",
    ]
    labels = {diagnose(tmp_path, list(order)).rule_id for order in itertools.permutations(crash)}
    assert labels == {"python-user-error"}


def test_hardware_line_outranks_the_socket_error_it_caused(tmp_path: Path) -> None:
    for lines in (["NCCL WARN Net : Connection closed by remote peer h<1>", "NVRM: Xid (PCI:0000:1a:00): 145, RLW error"],
                  ["NVRM: Xid (PCI:0000:1a:00): 145, RLW error", "NCCL WARN Net : Connection closed by remote peer h<1>"]):
        d = diagnose(tmp_path, lines)
        assert (d.rule_id, d.exclude_node) == ("gpu-hardware-fault", True)
        assert "gloo-connection-closed" in d.also_matched  # the socket line was seen, as a cascade


def test_earliest_error_wins_between_two_root_classes(tmp_path: Path) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    nccl = "RuntimeError: NCCL error: unhandled system error"
    noise = [f"step {i} loss 2.0" for i in range(10)]  # two separate events, not one traceback
    assert diagnose(tmp_path, [oom, *noise, nccl]).rule_id == "cuda-oom"
    assert diagnose(tmp_path, [nccl, *noise, oom]).rule_id == "nccl-error"
    # lines of one event (a few lines apart): the more specific rule decides, in any order
    assert diagnose(tmp_path, [oom, nccl]).rule_id == diagnose(tmp_path, [nccl, oom]).rule_id


def test_exit_zero_with_a_traceback_decides_on_the_error_and_says_so(tmp_path: Path) -> None:
    lines = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    d = diagnose(tmp_path, lines, exit_code=0)
    assert (d.rule_id, d.decision) == ("cuda-oom", Decision.ABORT)
    assert d.hint.startswith("Exit 0, but the log shows an error and no sign that the training finished")
    clean = diagnose(tmp_path, ["step 10 loss 1.0", "training done"], exit_code=0)
    assert clean.decision is Decision.COMPLETE


def test_hardware_faults_are_never_retried_twice_on_the_same_node() -> None:
    """For every hardware / node / network / ambiguous-GPU rule: after one occurrence on
    a node, the next occurrence on that node is never another retry in place."""
    suspects = [r for r in RULES.rules if r.exclude_node or r.category in {"hardware", "node-health", "network", "cuda-error"}]
    assert len(suspects) >= 6
    for rule in suspects:
        first = decide(diagnosis(rule.id), History(), Budgets(), node="n1", allocation="a1", step=100,
                       retries_used_in_allocation=0)
        history = _with_outcome(History(), {"rule": rule.id, "decision": str(first.action), "node": "n1",
                                            "allocation": "a1", "checkpoint_step_after": 100,
                                            "counts_as_failure": True})
        second = decide(diagnosis(rule.id), history, Budgets(), node="n1", allocation="a1", step=100,
                        retries_used_in_allocation=1 if first.action is Decision.RETRY else 0)
        assert not (first.action is Decision.RETRY and second.action is Decision.RETRY), rule.id


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(text, encoding="utf-8")
    return path


TABLE = """
tables:
  mine:
    source: https://example.org/errors
    list: the example list
    patterns: ['E(?:{key}):']
    rows:
      - {key: 1, text: one, action: doc, class: bad}
      - {key: 12, text: twelve, action: doc, class: good}
rules:
  - id: team/bad
    category: x
    decision: abort
    match: {table: {name: mine, classes: [bad]}}
"""


def test_a_user_file_can_carry_its_own_table(tmp_path: Path) -> None:
    (rule,) = load_rule_file(write(tmp_path, TABLE))
    assert rule.cites == ("https://example.org/errors",)
    assert rule.patterns[0].search("E1: boom") and not rule.patterns[0].search("E12: fine")


@pytest.mark.parametrize(("change", "message"), [
    (("classes: [bad]", "classes: [ugly]"), "table mine has no class 'ugly'"),
    (("name: mine, classes", "name: theirs, classes"), "no table 'theirs'"),
    (("source: https://example.org/errors", "source: example.org"), "is not an https URL"),
    (("{key: 12, text: twelve", "{key: 1, text: twelve"), "key '1' appears twice"),
    (("patterns: ['E(?:{key}):']", "patterns: ['E:']"), "has neither {key} nor {text}"),
])
def test_table_mistakes_are_one_line_errors(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    path = write(tmp_path, TABLE.replace(*change))
    with pytest.raises(RulesError) as caught:
        load_rule_file(path)
    text = str(caught.value)
    assert message in text and "\n" not in text and str(path) in text
    assert re.search(r"(table|rule) '", text)
