"""Start-up cost of the classifier in a new process: what `resched classify` and each
`resched wrap` pay before the first line is scanned.

    .venv/bin/python benchmarks/classify_startup.py [--rounds 5]

Each round starts fresh Python processes (so nothing is cached in memory) that classify
the same 3-line log, in three states of resched's cache dir (a temporary one):

- ``cold``: no stored prefilter database: Hyperscan compiles the catalogue's patterns
  (and stores the result);
- ``stored``: the database stored by the cold run is loaded from disk;
- ``pure-re``: ``RESCHED_PREFILTER=re`` (no Hyperscan at all), for scale.

It prints each state's best wall time over the rounds and its ratio to ``cold``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHILD = """
import sys
from pathlib import Path
from wrapper.classifier import classify_artifacts
from wrapper.classifier.rules import load_rules
d = classify_artifacts(exit_code=1, signal=None, logs=[Path(sys.argv[1])], error_files=[],
                       rules=load_rules(), launcher=None)
assert d.rule_id == "nccl-error", d.rule_id
"""
LOG = ("step 10 loss 2.0\n"
       "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n"
       "exiting\n")


def _run(log: Path, cache: Path, **extra: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO), RESCHED_CACHE_DIR=str(cache), **extra)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", CHILD, str(log)], env=env, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.log"
        log.write_text(LOG)
        for round_ in range(args.rounds):
            cache = Path(tmp) / f"cache-{round_}"  # empty: the cold run compiles
            for state, extra in (("cold", {}), ("stored", {}), ("pure-re", {"RESCHED_PREFILTER": "re"})):
                seconds = _run(log, cache, **extra)
                best[state] = min(best.get(state, seconds), seconds)
    for state, seconds in best.items():
        print(f"{state:8} {seconds:6.3f} s  ratio to cold {seconds / best['cold']:.2f}")


if __name__ == "__main__":
    main()
