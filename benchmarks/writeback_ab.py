"""A/B of the early writeback kick (hashing.start_writeback) in publish and restore.

The same 1 GiB tree (4 files) is published into a fresh file:// store and restored, with
the kick on and off in alternating rounds in one process, and `cp -r && sync` of the
tree in each round as the baseline. Not a test: it prints medians.

    .venv/bin/python benchmarks/writeback_ab.py [ROUNDS]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wrapper.checkpoint import CheckpointStore
from wrapper.checkpoint import hashing


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    kick = hashing.start_writeback
    samples: dict[str, list[float]] = {k: [] for k in
                                       ("publish_on", "publish_off", "restore_on",
                                        "restore_off", "cp_sync")}
    with tempfile.TemporaryDirectory(prefix="resched-writeback-") as tmp:
        root = Path(tmp)
        (root / "src").mkdir()
        for index in range(4):
            with open(root / "src" / f"shard{index}.bin", "wb") as handle:
                for _ in range(256):
                    handle.write(os.urandom(1 << 20))
        os.sync()
        for number in range(rounds):
            for mode in ("on", "off"):
                hashing.start_writeback = kick if mode == "on" else (lambda fd: None)
                store = f"file://{root / f'store-{mode}-{number}'}"
                os.environ["RESCHED_CACHE_DIR"] = str(root / f"cache-{mode}-{number}")
                started = time.perf_counter()
                CheckpointStore(store).publish(root / "src")
                samples[f"publish_{mode}"].append(time.perf_counter() - started)
                target = root / f"restored-{mode}-{number}"
                started = time.perf_counter()
                CheckpointStore(store).restore(target)
                samples[f"restore_{mode}"].append(time.perf_counter() - started)
                shutil.rmtree(target)
                shutil.rmtree(root / f"store-{mode}-{number}")
                os.sync()
            started = time.perf_counter()
            subprocess.run(["cp", "-r", str(root / "src"), str(root / "copy")], check=True)
            os.sync()
            samples["cp_sync"].append(time.perf_counter() - started)
            shutil.rmtree(root / "copy")
            os.sync()
    hashing.start_writeback = kick
    for name, values in samples.items():
        print(f"{name:12s} median {statistics.median(values):.3f} s  "
              f"({', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
