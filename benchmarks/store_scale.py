"""The checkpoint store and history at scale, against a real S3 server on 127.0.0.1.

    python benchmarks/store_scale.py [--tasks 200] [--rounds 3] [--writers 16]

Starts SeaweedFS on loopback (stopped by its own pid at the end), then:
- many tasks at once, each publishing its own store (with its history inside) R times;
- W processes racing for one store.
Prints, per shape: commits, refusals as busy, errors, lost updates, corrupt stores, the
hottest key's writes per second, and all writes per second (one JSON object per shape).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
