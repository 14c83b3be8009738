"""Straggler detection with nvidia_resiliency_ext.straggler, stop-if-detected style.

Every rank times its ``step`` section with ``straggler.Detector``; rank 0 gets the
report (relative performance per rank and section), logs one score line per report,
and when a rank is below the threshold (in ``--consecutive-reports`` reports in a row) it
logs the report as NVRx's callbacks do
(``STRAGGLER DETECTION WARNING ... Affected ranks: {StragglerId(rank=R, node='N')}``),
every rank saves and exits 0 before the end of training (as Megatron-Bridge's /
NeMo's ``stop_if_detected``). Each node's local rank 0 writes the report as JSON to
``$RESCHED_STRAGGLER_REPORT`` (set by its ``resched wrap``), so every node's wrapper
reschedules without the flagged ranks' nodes.

What the ``step`` section times is the rank's own compute only: no collective inside
(a rank waiting in an all-reduce for a slow peer would be timed as slow too, and only
noise would separate them) and one intra-op thread (two ranks sharing two cores must
not fight over threads). Rank 0's report gathering, logging and file writing happen
outside the section. Relative score = the fastest rank's median step time / this
rank's median (NVRx's ``ReportGenerator``), computed per report interval.

Checkpoints use Megatron's layout (``iter_{N:07d}/`` + ``latest_checkpointed_iteration.txt``
written last), by global rank 0 only; on resume rank 0 reads it and broadcasts the state
(tasks of one group do not share a filesystem).

``--cpu-stubs``: on a machine without a GPU, the CUPTI kernel profiler's CUDA-only calls
(``get_results``, ``reset_results``, ``shutdown``) and ``torch.cuda.synchronize`` /
``current_device`` are replaced by CPU no-ops; section timings (CPU wall time), the
scores and the report are NVRx's own code. libcupti comes from the
``nvidia-cuda-cupti-cu12`` wheel.
"""

import argparse
import ctypes
import glob
import hashlib
import io
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Optional

PREFIX = "resched-train:"  # the line protocol `resched run` reads (see templates/train.py)
TRACKER = "latest_checkpointed_iteration.txt"  # Megatron's: names the newest complete save


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--work", type=int, default=1000,
                        help="matrix products per step: CPU work, so a slowed CPU (or "
                             "`resched run --chaos slow:TASK=F`) makes the step slower")
    parser.add_argument("--slow-rank", type=int, default=None,
                        help="this rank's steps take --slow-factor times longer")
    parser.add_argument("--slow-factor", type=float, default=4.0)
    parser.add_argument("--report-interval", type=float, default=1.0)
    parser.add_argument("--threshold", type=float, default=0.5,
                        help="relative score under which a rank is a straggler")
    parser.add_argument("--consecutive-reports", type=int, default=1,
                        help="stop when a rank was under the threshold in this many reports "
                             "in a row (1: at the first, as NVRx's callbacks do)")
    parser.add_argument("--node-name", default=os.environ.get("RESCHED_NODE_OF_RANK"),
                        help="node name in the report (default: the host name; a "
                             "'{rank}' in it is replaced, to emulate nodes on one machine)")
    parser.add_argument("--finished-flag", type=Path, default=None,
                        help="written by every node's local rank 0 when training ended")
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="resume from / save to (global rank 0 only)")
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="save every N steps (0: only when stopping)")
    parser.add_argument("--report-only", action="store_true",
                        help="log every report's scores and never stop (to measure them)")
    parser.add_argument("--cpu-stubs", action="store_true")
    return parser.parse_args(argv)


def install_cpu_stubs() -> None:
    import nvidia.cuda_cupti  # the wheel's libcupti, which the extension links against
    import torch

    lib_dir = os.path.join(list(nvidia.cuda_cupti.__path__)[0], "lib")
    ctypes.CDLL(sorted(glob.glob(os.path.join(lib_dir, "libcupti.so*")))[0],
                mode=ctypes.RTLD_GLOBAL)
    from nvidia_resiliency_ext.straggler import cupti, straggler

    class CpuCupti(cupti.CuptiManager):
        def get_results(self) -> dict:  # CUDA kernel timings: there are none on a CPU
            return {}

        def reset_results(self) -> None:
            pass

        def shutdown(self) -> None:  # CUPTI's finalize needs a GPU
            self.is_initialized = False

    straggler.CuptiManager = CpuCupti
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: "cpu"


def report_json(report: Any, threshold: float) -> dict:
    flagged = report.identify_stragglers(gpu_rel_threshold=threshold,
                                         section_rel_threshold=threshold)
    ranks = {s.rank for group in flagged["straggler_sections_relative"].values() for s in group}
    ranks |= {s.rank for s in flagged["straggler_gpus_relative"]}
    sections = {name: {str(r): float(v) for r, v in scores.items()}
                for name, scores in report.section_relative_perf_scores.items()}
    return {"rank_to_node": {str(r): n for r, n in report.rank_to_node.items()},
            "gpu_relative": {str(r): float(v) for r, v in report.gpu_relative_perf_scores.items()
                             if v == v},  # NaN: no CUDA kernels were timed
            "section_relative": sections, "stragglers": sorted(ranks), "threshold": threshold}


def persistent(data: dict, streaks: dict[int, int], needed: int) -> dict:
    """``data`` with ``stragglers`` = the ranks flagged in ``needed`` reports in a row
    (``streaks`` is updated): a rank that had one slow interval (another process took
    its CPU for a while) is not a slow node."""
    flagged = set(data["stragglers"])
    for rank in [int(r) for r in data["rank_to_node"]]:
        streaks[rank] = streaks.get(rank, 0) + 1 if rank in flagged else 0
    return {**data, "stragglers": sorted(r for r, n in streaks.items() if n >= needed)}


def log_report(data: dict) -> None:
    ids = ", ".join(f"StragglerId(rank={r}, node='{data['rank_to_node'][str(r)]}')"
                    for r in data["stragglers"])
    print(f"STRAGGLER DETECTION WARNING: Some ranks have worse relative performance. "
          f"Affected ranks: {{{ids}}}", flush=True)
    for name, scores in data["section_relative"].items():
        for rank, score in sorted(scores.items(), key=lambda item: int(item[0])):
            print(f"  Section={name} Rank={rank} Node={data['rank_to_node'][rank]} "
                  f"Score={score:.2f}", flush=True)


def score_line(step: int, data: dict) -> str:
    """One line per report (rank 0): what separated the ranks, for logs and measurements."""
    scores = data["section_relative"].get("step", {})
    text = " ".join(f"{r}={s:.3f}" for r, s in sorted(scores.items(), key=lambda i: int(i[0])))
    return f"{PREFIX} report at step {step}: step scores {text} stragglers {data['stragglers']}"


def broadcast_bytes(payload: Optional[bytes], rank: int) -> bytes:
    """Rank 0's bytes on every rank (gloo; broadcast_object_list would need numpy)."""
    import torch
    import torch.distributed as dist

    size = torch.tensor([len(payload or b"")], dtype=torch.int64)
    dist.broadcast(size, src=0)
    buffer = (torch.frombuffer(bytearray(payload or b"\0"), dtype=torch.uint8)[:int(size.item())]
              if rank == 0 else torch.empty(int(size.item()), dtype=torch.uint8))
    if int(size.item()):
        dist.broadcast(buffer, src=0)
    return bytes(buffer.untyped_storage())[:int(size.item())]


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def save(directory: Path, step: int, weight: Any) -> None:
    """Global rank 0: the state under iter_N/, then the tracker (Megatron's order)."""
    import torch

    folder = directory / f"iter_{step:07d}"
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({"step": step, "weight": weight}, buffer)
    write_atomic(folder / "model.pt", buffer.getvalue())
    write_atomic(directory / TRACKER, f"{step}\n".encode())


def restore(directory: Optional[Path], rank: int, weight: Any) -> tuple[int, Any]:
    """(step, weight) from rank 0's newest save, on every rank; (0, weight) without one."""
    import torch

    payload = b""
    if rank == 0 and directory is not None and (directory / TRACKER).is_file():
        step = int((directory / TRACKER).read_text().strip())
        payload = (directory / f"iter_{step:07d}" / "model.pt").read_bytes()
    data = broadcast_bytes(payload, rank)
    if not data:
        return 0, weight
    state = torch.load(io.BytesIO(data), weights_only=True)
    return int(state["step"]), state["weight"]


def update(weight: Any, step: int) -> Any:
    """The "model" update of one step: identical on every rank, different every step,
    so the final weights show whether a resume repeated or skipped a step."""
    import torch

    return 0.99 * weight + 0.01 * torch.sin(step * weight)


def checksum(weight: Any) -> str:
    return hashlib.sha256(bytes(weight.contiguous().untyped_storage())).hexdigest()


def write_report_file(data: dict) -> None:
    target = os.environ.get("RESCHED_STRAGGLER_REPORT")
    if target:
        write_atomic(Path(target), json.dumps(data).encode())


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.cpu_stubs:
        install_cpu_stubs()
    import torch
    import torch.distributed as dist
    from nvidia_resiliency_ext import straggler

    torch.set_num_threads(1)  # ranks share the cores: extra intra-op threads only add noise
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    local_rank0 = os.environ.get("LOCAL_RANK", "0") == "0"
    node = (args.node_name or socket.gethostname()).replace("{rank}", str(rank))
    generator = torch.Generator().manual_seed(1234)  # every rank the same starting model
    weight = torch.randn(64, 64, generator=generator) / 8
    start, weight = restore(args.checkpoint_dir, rank, weight)
    if rank == 0:
        print(f"{PREFIX} resumed from step {start}" if start else f"{PREFIX} starting at step 0",
              flush=True)
    straggler.Detector.initialize(scores_to_compute="all", gather_on_rank0=True,
                                  report_time_interval=args.report_interval, node_name=node)
    slow = args.slow_factor if rank == args.slow_rank else 1.0
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(rank))
    stop = torch.zeros(1)
    streaks: dict[int, int] = {}
    step = start
    for step in range(start + 1, args.steps + 1):
        # the timed section: this rank's own compute, nothing that waits for a peer
        with straggler.Detector.detection_section("step", profile_cuda=False):
            for _ in range(int(args.work * slow)):
                x = torch.tanh(x @ weight)
        weight = update(weight, step)
        if rank == 0:
            print(f"{PREFIX} step {step}", flush=True)
        report = straggler.Detector.generate_report_if_interval_elapsed()
        data: Optional[dict] = None
        if rank == 0 and report is not None:
            data = report_json(report, args.threshold)
            print(score_line(step, data), flush=True)
            data = persistent(data, streaks, args.consecutive_reports)
            if data["stragglers"] and not args.report_only:
                stop.fill_(1)
        if straggler.Detector.is_interval_elapsed():  # every rank reaches it at the same step
            dist.broadcast(stop, 0)
        if stop.item():
            encoded = broadcast_bytes(json.dumps(data).encode() if rank == 0 else None, rank)
            if local_rank0:  # each node's wrapper reads the report in its own task
                data = json.loads(encoded)
                log_report(data)
                write_report_file(data)
            break
        if (rank == 0 and args.checkpoint_dir is not None and args.checkpoint_every
                and step % args.checkpoint_every == 0 and step < args.steps):
            save(args.checkpoint_dir, step, weight)
            print(f"{PREFIX} checkpoint step {step}", flush=True)
    finished = not stop.item()
    if rank == 0 and args.checkpoint_dir is not None:
        save(args.checkpoint_dir, step, weight)  # the stop-if-detected save, or the last one
        print(f"{PREFIX} checkpoint step {step}", flush=True)
    if rank == 0 and not finished:
        print(f"{PREFIX} stragglers detected: saved at step {step}, stopping (not finished)",
              flush=True)
    straggler.Detector.shutdown()
    dist.barrier()  # nobody exits (and gets its peers killed) while rank 0 is saving
    if finished:
        if rank == 0:
            print(f"{PREFIX} final checksum {checksum(weight)}", flush=True)
        if local_rank0 and args.finished_flag is not None:
            args.finished_flag.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(args.finished_flag, f"{step}\n".encode())
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
