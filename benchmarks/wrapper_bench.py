"""Benchmark of `resched wrap`'s overheads (not a test: it prints ratios, asserts nothing).

Measured in one run, each against a baseline taken in the same run:

1. output throughput through `resched wrap` vs the same command run directly (both
   read through a pipe by this script), for `yes`, 1 MiB writes, one print() per line,
   100 MB without a newline and 1-byte writes (goal >= 0.9), with the wrapper's peak RSS
   (goal <= 60 MB); `--fallback` adds the read/write path (RESCHED_NO_SPLICE=1, what
   ran before zero-copy forwarding) to the same run, as the before/after comparison;
2. per-step overhead of `wrapper.heartbeat()` in a small torch training loop
   (goal < 1 %);
3. hang detection latency minus the timeout: detection time (the wrapper's
   `failure_detected` event) - last progress (the heartbeat file's mtime, or the time
   of the last output line) - timeout (goal < 0.5 s).

Usage: .venv/bin/python benchmarks/wrapper_bench.py [--mb 200] [--steps 3000]
       .venv/bin/python benchmarks/wrapper_bench.py --only throughput --mb 1024 --fallback
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
sys.path.insert(0, str(REPO))

from wrapper.linesink import enlarge_pipe

PRODUCER = """
import sys
line = "[rank 0] iteration 1234/100000 | consumed samples 157952 | lm loss 2.345678E+00 | lr 1.0E-04 | grad norm 0.873 | tokens/s 123456"
total = int(sys.argv[1]) * 1024 * 1024
if sys.argv[2] == "blocks":  # worst case: 1 MiB writes, as fast as memory allows
    block = ((line + "\\n") * (1024 * 1024 // (len(line) + 1))).encode()
    out, sent = sys.stdout.buffer, 0
    while sent < total:
        out.write(block)
        sent += len(block)
    out.flush()
elif sys.argv[2] == "bytes":  # worst case for per-write costs: one byte per write
    import os
    for _ in range(total):
        os.write(1, b"x")
else:  # a training log: one print() per line
    for _ in range(total // (len(line) + 1)):
        print(line)
"""

HANG_CHILD = """
import os, sys, time
from wrapper import heartbeat
mode = sys.argv[1]
for step in range(20):
    time.sleep(0.05)
    if mode == "heartbeat":
        heartbeat()
    else:
        print(f"step {step}", flush=True)
        last = time.time()  # the line is in the pipe now
if mode == "heartbeat":
    last = os.stat(os.environ["RESCHED_HEARTBEAT_FILE"]).st_mtime
with open(sys.argv[2], "w") as handle:
    handle.write(repr(last))
time.sleep(600)
"""


# The least any forwarding process can do: start the command, splice its stdout to ours,
# nothing else (no scan, no tee, no bookkeeping). Its ratio to the direct pipe is the
# ceiling for a forwarder on this machine: on 2 cores that the producer and the reader
# already use, a third process costs scheduling whatever it does.
CEILING = """
import fcntl, os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
fd = proc.stdout.fileno()
fcntl.fcntl(fd, 1031, 1 << 20)
while os.splice(fd, 1, 1 << 20):
    pass
sys.exit(proc.wait())
"""


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def wrap_argv(state: Path, *options: str) -> list[str]:
    return [PYTHON, "-m", "workflows.cli", "wrap", "--state-dir", str(state), *options, "--"]


def drain(argv: list[str], **extra_env: str) -> tuple[int, float, float, int, float]:
    """Run ``argv``, read its stdout to EOF.

    Returns (bytes, first byte -> EOF s, start -> exit s, peak RSS KiB of ``argv``'s
    process and its waited-for descendants, from wait4, CPU s of ``argv``'s process
    alone: all its threads, none of its children)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=child_env(**extra_env), cwd=REPO)
    assert proc.stdout is not None
    fd, received, first = proc.stdout.fileno(), 0, None
    enlarge_pipe(fd)  # the same 1 MiB pipe the wrapper gives its command: a fair baseline
    while True:
        chunk = os.read(fd, 1 << 16)  # 64 KiB: 1 MiB reads allocate a fresh buffer each time
        if not chunk:
            break
        if first is None:
            first = time.perf_counter()
        received += len(chunk)
    eof = time.perf_counter()
    own_cpu = _own_cpu_s(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (received, eof - (first or eof), time.perf_counter() - started, usage.ru_maxrss,
            own_cpu)


def _own_cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` itself, read from /proc while it is a zombie (Linux)."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, AttributeError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrapper_startup_cpu_s(repeats: int) -> float:
    """The wrapper's own CPU for a command with no output: start-up and exit."""
    with tempfile.TemporaryDirectory() as tmp:
        return min(drain([*wrap_argv(Path(tmp) / f"t{i}"), "true"])[4] for i in range(repeats))


def bench_throughput(megabytes: int, repeats: int, style: str,
                     fallback: bool = False, ceiling: bool = False) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        producer = Path(tmp) / "producer.py"
        producer.write_text(PRODUCER)
        forwarder = Path(tmp) / "forwarder.py"
        forwarder.write_text(CEILING)
        direct_cmd = [PYTHON, str(producer), str(megabytes), style]
        if style == "yes":  # the real `yes`: 2-byte lines as fast as the pipe takes them
            direct_cmd = ["sh", "-c", f"yes | head -c {megabytes * 1024 * 1024}"]
        elif style == "no-newline":  # one line as long as the whole output
            direct_cmd = ["head", "-c", str(megabytes * 1024 * 1024), "/dev/zero"]
        direct, wrapped, old, bare = [], [], [], []
        for attempt in range(repeats):  # interleaved, so a drift in load hits all alike
            direct.append(drain(direct_cmd))
            wrapped.append(drain([*wrap_argv(Path(tmp) / f"s{attempt}"), *direct_cmd]))
            if fallback:
                old.append(drain([*wrap_argv(Path(tmp) / f"f{attempt}"), *direct_cmd],
                                 RESCHED_NO_SPLICE="1"))
            if ceiling:
                bare.append(drain([PYTHON, str(forwarder), *direct_cmd]))
    size = direct[0][0]
    assert all(run[0] == size for run in direct + wrapped + old + bare), "byte counts differ"
    if bare:
        extra_ceiling = {
            "ceiling_MBps": size / 1e6 / min(run[1] for run in bare),
            "ceiling_ratio": min(run[1] for run in direct) / min(run[1] for run in bare),
            "wrap_vs_ceiling": min(run[1] for run in bare) / min(run[1] for run in wrapped),
        }
    else:
        extra_ceiling = {}
    extra = {} if not old else {
        "fallback_MBps": size / 1e6 / min(run[1] for run in old),
        "fallback_ratio": min(run[1] for run in direct) / min(run[1] for run in old),
        "fallback_peak_rss_MB": max(run[3] for run in old) / 1024,
        "fallback_cpu_s": min(run[4] for run in old),
    }
    best_direct_stream = min(run[1] for run in direct)
    best_wrapped_stream = min(run[1] for run in wrapped)
    best_direct_total = min(run[2] for run in direct)
    best_wrapped_total = min(run[2] for run in wrapped)
    mb = size / 1e6
    return {
        "bytes": size,
        "direct_MBps": mb / best_direct_stream,
        "wrapped_MBps": mb / best_wrapped_stream,
        "stream_ratio": best_direct_stream / best_wrapped_stream,
        "direct_total_s": best_direct_total,
        "wrapped_total_s": best_wrapped_total,
        "total_ratio": best_direct_total / best_wrapped_total,
        "wrapped_peak_rss_MB": max(run[3] for run in wrapped) / 1024,
        "wrapped_cpu_s": min(run[4] for run in wrapped),
        **extra,
        **extra_ceiling,
    }


def bench_heartbeat(steps: int, trials: int) -> dict[str, float]:
    import torch

    from wrapper import heartbeat

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data, target = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def loop(with_heartbeat: bool) -> float:
        started = time.perf_counter()
        for _ in range(steps):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            if with_heartbeat:
                heartbeat()
        return time.perf_counter() - started

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RESCHED_HEARTBEAT_FILE"] = str(Path(tmp) / "heartbeat")
        loop(True)  # warm-up
        base, beat = [], []
        for trial in range(trials):  # interleaved ABBA, so drifts hit both alike
            for with_heartbeat in ((False, True) if trial % 2 == 0 else (True, False)):
                (beat if with_heartbeat else base).append(loop(with_heartbeat))
        del os.environ["RESCHED_HEARTBEAT_FILE"]
    per_call = _heartbeat_call_cost()
    step_s = min(base) / steps
    paired = [100 * (b - a) / a for a, b in zip(base, beat)]  # adjacent trials, ABBA order
    return {
        "step_ms": step_s * 1e3,
        "overhead_min_pct": 100 * (min(beat) - min(base)) / min(base),
        "overhead_median_pct": statistics.median(paired),
        "heartbeat_call_us": per_call * 1e6,
        "call_cost_pct_of_step": 100 * per_call / step_s,
    }


def _heartbeat_call_cost() -> float:
    from wrapper import heartbeat

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RESCHED_HEARTBEAT_FILE"] = str(Path(tmp) / "heartbeat")
        calls = 200_000
        started = time.perf_counter()
        for _ in range(calls):
            heartbeat()
        cost = (time.perf_counter() - started) / calls
        del os.environ["RESCHED_HEARTBEAT_FILE"]
    return cost


def bench_hang(mode: str, timeout_s: float, trials: int) -> dict[str, float]:
    latencies = []
    with tempfile.TemporaryDirectory() as tmp:
        child = Path(tmp) / "child.py"
        child.write_text(HANG_CHILD)
        for trial in range(trials):
            last_file = Path(tmp) / f"last{trial}"
            argv = [*wrap_argv(Path(tmp) / f"s{trial}", "--hang-timeout", str(timeout_s),
                               "--grace", "0.5", "--max-retries", "0"),
                    PYTHON, str(child), mode, str(last_file)]
            result = subprocess.run(argv, capture_output=True, text=True, env=child_env(),
                                    cwd=REPO, timeout=120, check=False)
            detected = _hang_event_time(result.stderr)
            last_progress = float(last_file.read_text())
            latencies.append(detected - last_progress - timeout_s)
    return {"timeout_s": timeout_s, "latency_minus_timeout_max_s": max(latencies),
            "latency_minus_timeout_median_s": statistics.median(latencies)}


def _hang_event_time(stderr: str) -> float:
    for line in stderr.splitlines():
        if line.startswith("resched: event failure_detected "):
            payload = json.loads(line.split(" ", 3)[3])
            if payload.get("kind") == "hang":
                return float(payload["t"])
    raise RuntimeError(f"no hang was detected:\n{stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=200, help="output volume for the throughput run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--only", choices=("throughput", "heartbeat", "hang"), default=None)
    parser.add_argument("--shapes", default="yes,blocks,print",
                        help="comma-separated: yes, blocks, print, no-newline, bytes")
    parser.add_argument("--fallback", action="store_true",
                        help="also time the read/write path (RESCHED_NO_SPLICE=1)")
    parser.add_argument("--ceiling", action="store_true",
                        help="also time a bare splice-only forwarder (what any extra "
                        "process can reach here)")
    args = parser.parse_args()
    if args.only in (None, "throughput"):
        report_throughput(args)
    if args.only in (None, "heartbeat"):
        report_heartbeat(args)
    if args.only in (None, "hang"):
        report_hang()


SHAPES = {"yes": "`yes` (2-byte lines)", "blocks": "1 MiB writes",
          "print": "one print() per log line", "no-newline": "one line without a newline",
          "bytes": "1-byte writes"}
# One syscall per byte: 1 GiB of it would take many minutes, and says nothing more.
_BYTES_SHAPE_MAX_MB = 4


def report_throughput(args: argparse.Namespace) -> None:
    startup_cpu = wrapper_startup_cpu_s(args.repeats)
    print(f"wrapper start-up + exit CPU (wrap -- true): {startup_cpu:.2f} s, "
          "subtracted below")
    for style in args.shapes.split(","):
        label = SHAPES[style]
        megabytes = min(args.mb, _BYTES_SHAPE_MAX_MB) if style == "bytes" else args.mb
        result = bench_throughput(megabytes, args.repeats, style, args.fallback, args.ceiling)
        print(f"throughput, {result['bytes'] / 1e6:.0f} MB written as {label} "
              f"(best of {args.repeats}):")
        print(f"  direct {result['direct_MBps']:.0f} MB/s, through resched wrap "
              f"{result['wrapped_MBps']:.0f} MB/s -> ratio {result['stream_ratio']:.2f} "
              "(goal >= 0.9; first byte to EOF)")
        print(f"  end to end incl. wrapper start: {result['direct_total_s']:.2f} s vs "
              f"{result['wrapped_total_s']:.2f} s -> ratio {result['total_ratio']:.2f}")
        gib = result["bytes"] / 2**30
        print(f"  wrapper peak RSS {result['wrapped_peak_rss_MB']:.0f} MB (goal <= 60 MB), "
              f"wrapper CPU {(result['wrapped_cpu_s'] - startup_cpu) / gib:.2f} s per GiB")
        if "fallback_ratio" in result:
            print(f"  read/write path (RESCHED_NO_SPLICE=1): {result['fallback_MBps']:.0f} MB/s "
                  f"-> ratio {result['fallback_ratio']:.2f}, peak RSS "
                  f"{result['fallback_peak_rss_MB']:.0f} MB, wrapper CPU "
                  f"{(result['fallback_cpu_s'] - startup_cpu) / gib:.2f} s per GiB")
        if "ceiling_ratio" in result:
            print(f"  bare splice forwarder (the ceiling of any forwarding process here): "
                  f"{result['ceiling_MBps']:.0f} MB/s -> ratio {result['ceiling_ratio']:.2f}; "
                  f"resched wrap reaches {result['wrap_vs_ceiling']:.2f} of it")


def report_heartbeat(args: argparse.Namespace) -> None:
    beat = bench_heartbeat(args.steps, args.trials)
    print(f"heartbeat (torch MLP step {beat['step_ms']:.3f} ms, {args.steps} steps x {args.trials}):")
    print(f"  loop overhead {beat['overhead_min_pct']:+.2f} % (min of trials), "
          f"{beat['overhead_median_pct']:+.2f} % (median of paired trials) (goal < 1 %)")
    print(f"  one heartbeat() call {beat['heartbeat_call_us']:.2f} us = "
          f"{beat['call_cost_pct_of_step']:.3f} % of a step")


def report_hang() -> None:
    for mode in ("heartbeat", "output"):
        hang = bench_hang(mode, timeout_s=1.0, trials=3)
        print(f"hang detection ({mode} progress, timeout {hang['timeout_s']:g} s, 3 runs): "
              f"latency - timeout = {hang['latency_minus_timeout_median_s']:.3f} s median, "
              f"{hang['latency_minus_timeout_max_s']:.3f} s max (goal < 0.5 s)")


if __name__ == "__main__":
    main()
