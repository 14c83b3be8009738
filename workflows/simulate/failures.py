"""Failures for the simulator: kinds, the Llama 3 mix, bad nodes, and trace files.

A failure kind says what the job sees (the log line and exit the real classifier gets),
how it is detected (a crash is seen at once, a hang only by a timeout), and whether the
node stays broken (a dead GPU fails every restart on it until the node is replaced or
repaired; a network flap or a software fault does not).

The default mix is the root-cause table of the Llama 3 405B pre-training run: 419
unexpected interruptions in 54 days on 16,384 H100 GPUs (Llama Team, "The Llama 3 Herd
of Models", arXiv:2407.21783, section 3.3.4, Table 5). Per-GPU rates are derived from
it, so the expected interruption rate scales with the number of GPUs.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from wrapper.errors import ReschedError


class TraceError(ReschedError):
    """A failure trace file that cannot be used."""


class Detection(StrEnum):
    CRASH = "crash"  # a process exits: the launcher / wrapper sees it within seconds
    HANG = "hang"  # ranks stop making progress: a hang timeout or NCCL's watchdog sees it
    NODE = "node"  # the node goes away: the orchestrator sees the pod / node lost


@dataclass(frozen=True)
class FailureKind:
    name: str
    detection: Detection
    persistent: bool  # the node keeps failing until it is replaced or repaired
    log: tuple[str, ...]  # what the training's log says (fed to the real classifier)
    exit_code: int | None
    signal: int | None = None


# What each kind looks like to `resched wrap` (lines in the style of the real messages).
KINDS: dict[str, FailureKind] = {k.name: k for k in (
    FailureKind("gpu", Detection.CRASH, True, (
        "NVRM: Xid (PCI:0000:1b:00): 79, pid=4242, GPU has fallen off the bus.",
        "RuntimeError: CUDA error: unspecified launch failure",
    ), exit_code=1),
    FailureKind("hbm", Detection.CRASH, True, (
        ("NVRM: Xid (PCI:0000:1b:00): 48, pid=4242, An uncorrectable double bit error (DBE) "
        "has been detected on GPU in the framebuffer at partition 6, subpartition 0."),
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ), exit_code=1),
    FailureKind("network", Detection.CRASH, False, (
        ("NCCL WARN NET/IB : Got completion from peer 10.0.0.7<54321> with status=12 "
        "opcode=0 len=0 vendor err 129 (Recv)"),
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "remote process exited or there was a network error, NCCL version 2.21.5"),
        ("ncclRemoteError: A call failed possibly due to a network error or a remote process "
        "exiting prematurely."),
    ), exit_code=1),
    FailureKind("software", Detection.CRASH, False, (
        ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"),
        ("ncclSystemError: System call (e.g. socket, malloc) or external library call "
        "failed or device error."),
    ), exit_code=1),
    FailureKind("hang", Detection.HANG, False, (
        ("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88112, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600051 "
        "milliseconds before timing out."),
    ), exit_code=1),
    FailureKind("host", Detection.NODE, True, (
        ("slurmstepd: error: *** JOB 4242 ON node0417 CANCELLED AT 2024-06-01T03:12:09 "
        "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"),
    ), exit_code=None, signal=9),
)}

# Llama 3 405B, Table 5: root-cause category -> (interruptions, simulator kind).
LLAMA3_TABLE: tuple[tuple[str, int, str], ...] = (
    ("Faulty GPU", 148, "gpu"),
    ("GPU HBM3 memory", 72, "hbm"),
    ("Software bug", 54, "software"),
    ("Network switch / cable", 35, "network"),
    ("Host maintenance", 32, "host"),
    ("GPU SRAM memory", 19, "hbm"),
    ("GPU system processor", 17, "gpu"),
    ("NIC", 7, "network"),
    ("NCCL watchdog timeouts", 7, "hang"),
    ("Silent data corruption", 6, "gpu"),
    ("GPU thermal interface + sensor", 6, "gpu"),
    ("SSD", 3, "host"),
    ("Power supply", 3, "host"),
    ("Server chassis", 2, "host"),
    ("IO expansion board", 2, "host"),
    ("Dependency", 2, "software"),
    ("CPU", 2, "host"),
    ("System memory", 2, "host"),
)
LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54.0
LLAMA3_INTERRUPTIONS = sum(count for _, count, _ in LLAMA3_TABLE)  # 419


def llama3_mix() -> dict[str, float]:
    """Share of each simulator kind in the Llama 3 table."""
    mix: dict[str, float] = {}
    for _, count, kind in LLAMA3_TABLE:
        mix[kind] = mix.get(kind, 0.0) + count / LLAMA3_INTERRUPTIONS
    return mix


def llama3_rate_per_gpu_s() -> float:
    """Interruptions per GPU-second in the Llama 3 run (419 / (16,384 GPUs x 54 days))."""
    return LLAMA3_INTERRUPTIONS / (LLAMA3_GPUS * LLAMA3_DAYS * 86400.0)


@dataclass(frozen=True)
class FailureModel:
    """Failures drawn per node: rate_per_gpu_s x gpus_per_node x the node's weight.

    ``bad_fraction`` of the nodes fail ``bad_factor`` times as often as the rest (the
    repeat offenders that node exclusion exists for); the base rate is scaled so that
    the cluster as a whole still fails at ``rate_per_gpu_s`` per GPU on average."""

    rate_per_gpu_s: float
    mix: tuple[tuple[str, float], ...]
    bad_fraction: float = 0.01
    bad_factor: float = 10.0

    def kind_for(self, rng: random.Random) -> FailureKind:
        names = [name for name, _ in self.mix]
        weights = [share for _, share in self.mix]
        return KINDS[rng.choices(names, weights)[0]]


@dataclass(frozen=True)
class TracedFailure:
    t_s: float
    kind: FailureKind
    node: int | None  # index of the job's node slot; None: drawn like a generated one


def load_trace(path: Path) -> tuple[TracedFailure, ...]:
    """A trace file: JSON Lines, one failure per line, in time order:

        {"t": 3600.5, "kind": "gpu", "node": 17}

    ``t`` seconds since the start of the job, ``kind`` one of the simulator's kinds,
    ``node`` (optional) the job's node slot 0..N-1. Blank lines and lines starting with
    ``#`` are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TraceError(f"cannot read the trace: {error}", where=str(path)) from None
    failures: list[TracedFailure] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        failures.append(_trace_line(line, f"{path}:{lineno}", failures[-1].t_s if failures else 0.0))
    return tuple(failures)


_TRACE_FIX = 'one JSON object per line, e.g. {"t": 3600, "kind": "gpu", "node": 17}'


def _trace_line(line: str, where: str, previous_t: float) -> TracedFailure:
    try:
        item = json.loads(line)
    except json.JSONDecodeError as error:
        raise TraceError(f"not JSON: {error.msg}", where=where, fix=_TRACE_FIX) from None
    if not isinstance(item, dict):
        raise TraceError("not a JSON object", where=where, fix=_TRACE_FIX)
    unknown = set(item) - {"t", "kind", "node"}
    if unknown:
        raise TraceError(f"unknown key(s) {sorted(unknown)}", where=where, fix=_TRACE_FIX)
    t = item.get("t")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise TraceError(f"t={t!r} is not a time in seconds >= 0", where=where, fix=_TRACE_FIX)
    if t < previous_t:
        raise TraceError(f"t={t} goes back in time (previous {previous_t})", where=where,
                         fix="sort the trace by t")
    kind = item.get("kind")
    if kind not in KINDS:
        raise TraceError(f"kind={kind!r} is not one of {sorted(KINDS)}", where=where, fix=_TRACE_FIX)
    node = item.get("node")
    if node is not None and (isinstance(node, bool) or not isinstance(node, int) or node < 0):
        raise TraceError(f"node={node!r} is not a node slot (0, 1, ...)", where=where, fix=_TRACE_FIX)
    return TracedFailure(float(t), KINDS[kind], node)


def exponential_gaps(rate_s: float, rng: random.Random) -> Iterator[float]:
    """Inter-arrival times of a Poisson process (rate per second)."""
    while True:
        yield rng.expovariate(rate_s) if rate_s > 0 else math.inf


def weighted_index(weights: Sequence[float], total: float, rng: random.Random) -> int:
    """An index drawn with probability weight / total (linear: called once per failure)."""
    point = rng.random() * total
    for index, weight in enumerate(weights):
        point -= weight
        if point < 0:
            return index
    return len(weights) - 1
