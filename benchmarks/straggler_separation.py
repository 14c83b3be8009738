"""How far NVRx's straggler scores separate a slowed task's rank from an unslowed one.

Mirrors ``resched run --chaos slow:worker_1=F`` on the two-task straggler template
without the executor around it: two torchruns (``--nnodes 2``, one rank each: two
emulated nodes), the second one under a token and throttled by the local executor's own
``Throttle`` (SIGSTOP / SIGCONT duty cycle, in its own process as the executor runs it) from the first training step on. examples/straggler_train.py runs with
``--report-only`` so every NVRx report's relative ``step`` scores are logged. Optional
background load: ``--load N`` starts N ``yes > /dev/null`` processes (stopped by their
pid at the end of each run).

    .venv/bin/python benchmarks/straggler_separation.py --runs 10 --factor 8 --steps 80
    .venv/bin/python benchmarks/straggler_separation.py --runs 10 --factor 0 --steps 200  # control
    .venv/bin/python benchmarks/straggler_separation.py --runs 10 --factor 8 --steps 80 --load 2

Prints, per run, every report's scores of rank 0 (never slowed) and rank 1, then the
minimum score of each rank over all runs, the maximum of rank 1's (the margin a
threshold has on either side), and in how many runs a rank was under the threshold in
two reports in a row (the template's stop rule).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workflows.backends.local import proctree  # noqa: E402
from workflows.backends.local.inject import start_throttle  # noqa: E402

SCORES = re.compile(r"report at step (\d+): step scores 0=([0-9.]+) 1=([0-9.]+)")


def free_port() -> int:
    for _ in range(100):
        port = random.randint(20000, 60000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port")


def one_run(args: argparse.Namespace, index: int) -> list[tuple[int, float, float]]:
    port = free_port()
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '')}")
    train = [str(REPO / "examples" / "straggler_train.py"), "--cpu-stubs", "--report-only",
             "--steps", str(args.steps), "--work", str(args.work),
             "--report-interval", str(args.interval), "--threshold", str(args.threshold)]
    procs, loads = [], []
    for node in (0, 1):
        token = f"straggler-bench-{os.getpid()}-{index}-{node}"
        argv = ["torchrun", "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node),
                "--master-addr", "127.0.0.1", "--master-port", str(port), *train,
                "--node-name", f"node-{node}"]
        procs.append((subprocess.Popen(
            ["sh", "-c", '"$@"; exit $?', "sh", *argv], env={**env, proctree.TOKEN_ENV: token},
            stdout=subprocess.PIPE if node == 0 else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, text=True, start_new_session=True), token))
    throttle: subprocess.Popen[bytes] | None = None
    lines: list[str] = []
    try:
        for _ in range(args.load):
            loads.append(subprocess.Popen(["sh", "-c", "exec yes > /dev/null"]))
        stdout = procs[0][0].stdout
        assert stdout is not None
        for line in stdout:  # slowed from the first step on, as `slow:TASK=F@1ckpt` does
            lines.append(line)
            if throttle is None and args.factor > 1 and "resched-train: step" in line:
                top, token = procs[1]
                throttle = start_throttle(token, top.pid, args.factor)  # as the executor does
        procs[0][0].wait(timeout=600)
        procs[1][0].wait(timeout=60)
    finally:
        for load in loads:
            load.send_signal(signal.SIGKILL)
            load.wait()
        for proc, token in procs:  # the ranks too: torchrun starts them in their own session
            proctree.kill_all(proc.pid, token)
            proc.wait()
    if throttle is not None:
        throttle.wait(timeout=10)  # it ends with the processes it throttled
    return [(int(m.group(1)), float(m.group(2)), float(m.group(3)))
            for m in SCORES.finditer("".join(lines))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--factor", type=float, default=4.0, help="0: no slow (the control)")
    parser.add_argument("--load", type=int, default=0, help="background `yes` processes")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--work", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--threshold", type=float, default=0.4)
    args = parser.parse_args()
    fast: list[float] = []
    slow: list[float] = []
    persistent_runs = 0  # runs where a rank was under the threshold 2 reports in a row
    for index in range(args.runs):
        reports = one_run(args, index)
        fast += [r0 for _s, r0, _r1 in reports]
        slow += [r1 for _s, _r0, r1 in reports]
        under = [min(r0, r1) < args.threshold for _s, r0, r1 in reports]
        persistent_runs += any(a and b for a, b in zip(under, under[1:]))
        text = "  ".join(f"@{s}: {r0:.2f}/{r1:.2f}" for s, r0, r1 in reports)
        print(f"run {index + 1}: rank0/rank1 {text}", flush=True)
    nan = float("nan")
    print(f"factor {args.factor:g} load {args.load} (loadavg {os.getloadavg()[0]:.1f}): "
          f"{len(fast)} reports; rank 0 min {min(fast, default=nan):.3f}; rank 1 min "
          f"{min(slow, default=nan):.3f} max {max(slow, default=nan):.3f}; under "
          f"{args.threshold:g} in 2 reports in a row: {persistent_runs}/{args.runs} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
