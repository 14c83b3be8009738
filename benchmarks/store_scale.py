"""The checkpoint store and history at scale, against a real S3 server on 127.0.0.1.

    python benchmarks/store_scale.py [--tasks 200] [--rounds 3] [--writers 16]
    python benchmarks/store_scale.py --small-files 100000 [--rounds 3]

Starts SeaweedFS on loopback (stopped by its own pid at the end), then:
- many tasks at once, each publishing its own store (with its history inside) R times;
- W processes racing for one store.
Prints, per shape: commits, refusals as busy, errors, lost updates, corrupt stores, the
hottest key's writes per second, and all writes per second (one JSON object per shape).

``--small-files N``: instead, N files of 70 B in 100 folders on a local disk (file://):
publish against ``cp -r && sync`` and restore against ``cp -r``, interleaved, each round
on a fresh copy and store, the ratios (baseline time / ours; >= 0.5 is the goal) taken
within one run; medians over ``--rounds``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO)]

from checkpoint_fixtures import start_weed, stop_weed  # noqa: E402
from store_scale_fixtures import many_stores, one_store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--small-files", type=int, default=0,
                        help="measure N files of 70 B on a local disk instead")
    args = parser.parse_args()
    if args.small_files:
        small_files(args.small_files, args.rounds)
        return
    work = Path(tempfile.mkdtemp(prefix="resched-store-scale-"))
    process, server = start_weed(work)
    try:
        base = server.url(f"scale-{uuid.uuid4().hex[:8]}")
        many = many_stores(server.storage_options, base, work / "many", tasks=args.tasks,
                           rounds=args.rounds)
        print(json.dumps({"shape": f"{args.tasks} tasks x {args.rounds} rounds, own stores",
                          **many.as_dict()}))
        race = one_store(server.storage_options, server.url(f"race-{uuid.uuid4().hex[:8]}"),
                         work / "race", writers=args.writers, rounds=args.rounds)
        print(json.dumps({"shape": f"{args.writers} writers x {args.rounds} rounds, one store",
                          **race.as_dict()}))
    finally:
        stop_weed(process, server)
        shutil.rmtree(work, ignore_errors=True)


def small_files(count: int, rounds: int) -> None:
    from wrapper.checkpoint import CheckpointStore, mark_complete

    work = Path(tempfile.mkdtemp(prefix="resched-small-files-", dir="/var/tmp"))
    os.environ["RESCHED_CACHE_DIR"] = str(work / "cache")
    try:
        src = work / "src"
        for index in range(count):
            folder = src / f"d{index % 100:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"f{index:06d}.bin").write_bytes(os.urandom(35).hex().encode())
        mark_complete(src, 1)
        times: dict[str, list[float]] = {k: [] for k in ("cp_sync", "publish", "cp", "restore")}
        for round_ in range(rounds):
            started = time.perf_counter()
            subprocess.run(["cp", "-r", str(src), str(work / f"cp{round_}")], check=True)
            subprocess.run(["sync"], check=True)
            times["cp_sync"].append(time.perf_counter() - started)
            store = CheckpointStore(f"file://{work}/store{round_}", hash_cache=False)
            started = time.perf_counter()
            store.publish(src)
            times["publish"].append(time.perf_counter() - started)
            subprocess.run(["sync"], check=True)
            started = time.perf_counter()
            subprocess.run(["cp", "-r", str(src), str(work / f"cq{round_}")], check=True)
            times["cp"].append(time.perf_counter() - started)
            started = time.perf_counter()
            store.restore(work / f"out{round_}")
            times["restore"].append(time.perf_counter() - started)
            print(json.dumps({"round": round_, **{k: round(v[-1], 2) for k, v in times.items()}}),
                  file=sys.stderr, flush=True)
            for name in (f"cp{round_}", f"cq{round_}", f"out{round_}", f"store{round_}"):
                shutil.rmtree(work / name)
        median = {k: statistics.median(v) for k, v in times.items()}
        print(json.dumps({
            "shape": f"{count} files of 70 B, file://, median of {rounds}",
            **{f"{k}_s": round(v, 2) for k, v in median.items()},
            "publish_vs_cp_sync": round(median["cp_sync"] / median["publish"], 2),
            "restore_vs_cp": round(median["cp"] / median["restore"], 2),
            "load_average": os.getloadavg()[0],
        }))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
