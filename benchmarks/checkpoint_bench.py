"""Checkpoint store throughput against plain baselines measured in the same run.

Not a test: it prints ratios (higher is better for throughput ratios).

    .venv/bin/python benchmarks/checkpoint_bench.py [--size-mb 1024] [--files 4]
                                                    [--repeat 3] [--no-s3]

- publish vs ``cp -r`` on file:// (goal >= 0.9 on large files)
- publish vs s3fs ``put`` of the same tree on a local SeaweedFS (started here)
- re-publish of the unchanged tree vs a full publish (goal <= 5 % of the time)
- restore vs ``cp -r`` (file://) and vs s3fs ``get`` (S3)
Medians of ``--repeat`` runs, page cache warm for baseline and store alike.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from wrapper.checkpoint import CheckpointStore, mark_complete
from wrapper.checkpoint.hashing import hash_file


def interleaved(cases: dict[str, tuple[Callable[[], object], Callable[[], object]]],
                repeat: int) -> dict[str, float]:
    """Median seconds of each case's action (after its setup). The cases run in turn
    within each round, so load from other processes hits baseline and store alike."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, (setup, action) in cases.items():
            setup()
            started = time.perf_counter()
            action()
            samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in samples.items()}


def nothing() -> None:
    return None


def make_tree(root: Path, size_mb: int, files: int) -> int:
    root.mkdir(parents=True)
    per_file = size_mb * (1 << 20) // files
    block = os.urandom(1 << 20)
    for index in range(files):
        with open(root / f"shard{index:03d}.bin", "wb") as handle:
            handle.writelines(index.to_bytes(4, "little") + chunk.to_bytes(4, "little")
                             + block[8:] for chunk in range(per_file >> 20))
    mark_complete(root, 1)
    time.sleep(0.1)  # past the hash cache's racy window for every file
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def fresh(path: Path) -> Callable[[], None]:
    def clear() -> None:
        shutil.rmtree(path, ignore_errors=True)
    return clear


def bench_file(work: Path, src: Path, total: int, repeat: int) -> dict[str, float]:
    store_dir, copy_dir, out_dir = work / "store", work / "cp", work / "restored"
    cached = CheckpointStore(f"file://{work / 'cached'}")
    cached.publish(src)  # fills the hash cache: re-publishes below are of an unchanged tree

    def cp() -> None:
        subprocess.run(["cp", "-r", str(src), str(copy_dir)], check=True)

    def full_publish() -> None:
        CheckpointStore(f"file://{store_dir}", hash_cache=False).publish(src)

    t = interleaved({
        "cp": (fresh(copy_dir), cp),
        "cp_sync": (fresh(copy_dir), lambda: (cp(), os.sync())),
        "sha256": (nothing, lambda: [hash_file(p) for p in sorted(src.iterdir())]),
        "publish": (fresh(store_dir), full_publish),
        "republish": (nothing, lambda: cached.publish(src)),
        "republish_nocache": (nothing, lambda: CheckpointStore(
            f"file://{work / 'cached'}", hash_cache=False).publish(src)),
        "republish_cli": (nothing, lambda: subprocess.run(
            [sys.executable, "-m", "workflows.cli", "checkpoint", "publish", str(src),
             f"file://{work / 'cached'}"], check=True, capture_output=True,
            cwd=Path(__file__).resolve().parents[1])),
        "restore": (fresh(out_dir), lambda: cached.restore(out_dir)),
    }, repeat)
    for folder in (copy_dir, out_dir, store_dir, work / "cached"):
        shutil.rmtree(folder, ignore_errors=True)
    mb = total / 1e6
    print(f"file:// ({mb:.0f} MB)")
    print(f"  cp -r                      {t['cp']:7.2f} s  {mb / t['cp']:7.0f} MB/s")
    print(f"  cp -r + sync               {t['cp_sync']:7.2f} s  {mb / t['cp_sync']:7.0f} MB/s")
    print(f"  sha256 of every file       {t['sha256']:7.2f} s  {mb / t['sha256']:7.0f} MB/s"
          "  (the CPU floor of any verified copy)")
    print(f"  publish (hash+copy+fsync)  {t['publish']:7.2f} s  {mb / t['publish']:7.0f} MB/s")
    print(f"  re-publish unchanged       {t['republish']:7.3f} s  (hash cache hit)")
    print(f"  re-publish, no hash cache  {t['republish_nocache']:7.2f} s  (every file re-hashed)")
    print(f"  re-publish via the CLI     {t['republish_cli']:7.3f} s  (process start-up included)")
    print(f"  restore (verify+fsync)     {t['restore']:7.2f} s  {mb / t['restore']:7.0f} MB/s")
    return {"publish_vs_cp": t["cp"] / t["publish"], "publish_vs_cp_sync": t["cp_sync"] / t["publish"],
            "republish_share": t["republish"] / t["publish"],
            "republish_cli_share": t["republish_cli"] / t["publish"],
            "republish_nocache_share": t["republish_nocache"] / t["publish"],
            "publish_vs_sha256": t["sha256"] / t["publish"],
            "restore_vs_cp": t["cp"] / t["restore"], "restore_vs_cp_sync": t["cp_sync"] / t["restore"]}


def bench_s3(work: Path, src: Path, total: int, repeat: int) -> dict[str, float]:
    import s3fs
    from checkpoint_fixtures import start_weed, stop_weed

    process, server = start_weed(work / "weed")
    try:
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)
        fs.put(str(src), f"{server.bucket}/source/", recursive=True)
        store = CheckpointStore(server.url("cached"), storage_options=server.storage_options)
        store.publish(src)
        rounds = iter(range(10**6))
        get_dir, out_dir = work / "get", work / "restored"

        def put() -> None:
            fs.put(str(src), f"{server.bucket}/put{next(rounds)}/", recursive=True)

        def publish() -> None:
            CheckpointStore(server.url(f"store{next(rounds)}"),
                            storage_options=server.storage_options, hash_cache=False).publish(src)

        t = interleaved({
            "put": (nothing, put),
            "publish": (nothing, publish),
            "republish": (nothing, lambda: store.publish(src)),
            "republish_nocache": (nothing, lambda: CheckpointStore(
                server.url("cached"), storage_options=server.storage_options,
                hash_cache=False).publish(src)),
            "get": (fresh(get_dir), lambda: fs.get(f"{server.bucket}/source/", str(get_dir),
                                                   recursive=True)),
            "restore": (fresh(out_dir), lambda: store.restore(out_dir)),
        }, repeat)
        shutil.rmtree(get_dir, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)
    finally:
        stop_weed(process, server)
    mb = total / 1e6
    print(f"s3:// on SeaweedFS at 127.0.0.1 ({mb:.0f} MB)")
    print(f"  s3fs put -r                {t['put']:7.2f} s  {mb / t['put']:7.0f} MB/s")
    print(f"  publish (hash+PUT)         {t['publish']:7.2f} s  {mb / t['publish']:7.0f} MB/s")
    print(f"  re-publish unchanged       {t['republish']:7.3f} s  (hash cache hit)")
    print(f"  re-publish, no hash cache  {t['republish_nocache']:7.2f} s  (hashing instead of "
          "re-uploading)")
    print(f"  s3fs get -r                {t['get']:7.2f} s  {mb / t['get']:7.0f} MB/s")
    print(f"  restore (GET+verify)       {t['restore']:7.2f} s  {mb / t['restore']:7.0f} MB/s")
    return {"s3_publish_vs_put": t["put"] / t["publish"],
            "s3_republish_share": t["republish"] / t["publish"],
            "s3_republish_nocache_share": t["republish_nocache"] / t["publish"],
            "s3_restore_vs_get": t["get"] / t["restore"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--no-file", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="resched-ckbench-", dir=args.workdir))
    try:
        os.environ["RESCHED_CACHE_DIR"] = str(work / "cache")  # not the user's ~/.cache
        src = work / "src"
        total = make_tree(src, args.size_mb, args.files)
        print(f"tree: {args.files} files, {total / 1e6:.0f} MB; median of {args.repeat} runs")
        ratios = {} if args.no_file else bench_file(work, src, total, args.repeat)
        if not args.no_s3:
            ratios |= bench_s3(work, src, total, args.repeat)
        print("ratios (throughput: baseline time / our time; share: our time / full publish)")
        for name, value in ratios.items():
            print(f"  {name:26} {value:6.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
