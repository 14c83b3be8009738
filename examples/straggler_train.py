"""Straggler detection with nvidia_resiliency_ext.straggler, stop-if-detected style.

Every rank times its ``step`` section with ``straggler.Detector``; rank 0 gets the
report (relative performance per rank and section), logs it as NVRx's callbacks do
(``STRAGGLER DETECTION WARNING ... Affected ranks: {StragglerId(rank=R, node='N')}``),
writes it as JSON to ``$RESCHED_STRAGGLER_REPORT`` when the wrapper set it, and, when a
rank is below the threshold, every rank saves and exits 0 before the end of training
(as Megatron-Bridge's / NeMo's ``stop_if_detected``). ``resched wrap`` then reschedules
the task without the flagged ranks' nodes.

``--cpu-stubs``: on a machine without a GPU, the CUPTI kernel profiler's CUDA-only calls
(``get_results``, ``reset_results``, ``shutdown``) and ``torch.cuda.synchronize`` /
``current_device`` are replaced by CPU no-ops; section timings (CPU wall time), the
scores and the report are NVRx's own code. libcupti comes from the
``nvidia-cuda-cupti-cu12`` wheel.
"""

import argparse
import ctypes
import glob
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Optional

PREFIX = "straggler-train:"


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
    parser.add_argument("--node-name", default=os.environ.get("RESCHED_NODE_OF_RANK"),
                        help="node name in the report (default: the host name; a "
                             "'{rank}' in it is replaced, to emulate nodes on one machine)")
    parser.add_argument("--finished-flag", type=Path, default=None)
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


def log_report(data: dict) -> None:
    ids = ", ".join(f"StragglerId(rank={r}, node='{data['rank_to_node'][str(r)]}')"
                    for r in data["stragglers"])
    print(f"STRAGGLER DETECTION WARNING: Some ranks have worse relative performance. "
          f"Affected ranks: {{{ids}}}", flush=True)
    for name, scores in data["section_relative"].items():
        for rank, score in sorted(scores.items()):
            print(f"  Section={name} Rank={rank} Node={data['rank_to_node'][rank]} "
                  f"Score={score:.2f}", flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.cpu_stubs:
        install_cpu_stubs()
    import torch
    import torch.distributed as dist
    from nvidia_resiliency_ext import straggler

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    node = (args.node_name or socket.gethostname()).replace("{rank}", str(rank))
    straggler.Detector.initialize(scores_to_compute="all", gather_on_rank0=True,
                                  report_time_interval=args.report_interval, node_name=node)
    slow = args.slow_factor if rank == args.slow_rank else 1.0
    weight, x = torch.randn(64, 64) / 8, torch.randn(64, 64)
    stop = torch.zeros(1)
    step = 0
    for step in range(1, args.steps + 1):
        with straggler.Detector.detection_section("step", profile_cuda=False):
            for _ in range(int(args.work * slow)):
                x = torch.tanh(x @ weight)
        if rank == 0:
            print(f"{PREFIX} step {step}", flush=True)
        report = straggler.Detector.generate_report_if_interval_elapsed()
        if rank == 0 and report is not None:
            data = report_json(report, args.threshold)
            if os.environ.get("RESCHED_STRAGGLER_REPORT"):
                Path(os.environ["RESCHED_STRAGGLER_REPORT"]).write_text(json.dumps(data))
            if data["stragglers"]:
                log_report(data)
                stop.fill_(1)
        if straggler.Detector.is_interval_elapsed() or stop.item():
            dist.broadcast(stop, 0)
        if stop.item():
            if rank == 0:
                print(f"{PREFIX} stragglers detected: saved at step {step}, stopping", flush=True)
            break
    straggler.Detector.shutdown()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0 and not stop.item() and args.finished_flag is not None:
        args.finished_flag.write_text("finished\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
