"""The results table of docs/simulate.md: every policy x scale, and how long each run took.

    python benchmarks/simulate_table.py [--days 30] [--seeds 5] [--resubmit-after 1h]

Prints a Markdown table, each number the mean over seeds 1..N: ETTR, its ratio to the
Young/Daly optimum for the same parameters, the interruptions, the lost time by cause
(hours), how many of the runs ended failed, and the mean wall-clock seconds one
simulation took (the speed goals: a month at 16,384 GPUs in
< 10 s, 100K GPUs in < 60 s on a 2-core machine).
"""

from __future__ import annotations

import argparse
import statistics
import time

from workflows.simulate import POLICIES, SimConfig, run
from workflows.simulate.engine import Mechanics
from wrapper.durations import parse_duration

SCALES = (1024, 4096, 16384, 65536, 100_000)
CAUSES = ("detection", "restart", "reschedule_wait", "lost_work", "checkpoint", "failed_idle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--resubmit-after", default=None)
    args = parser.parse_args()
    mech = Mechanics(checkpoint_interval_s=0.0, resubmit_after_s=parse_duration(args.resubmit_after)
                     if args.resubmit_after else None)
    print("| GPUs | policy | ETTR | / Young-Daly | interruptions | "
          + " | ".join(f"{c} h" for c in CAUSES) + " | failed | sim s |")
    print("|---" * (7 + len(CAUSES)) + "|")
    for gpus in SCALES:
        for policy in POLICIES:
            results, took = [], []
            for seed in range(1, args.seeds + 1):
                start = time.perf_counter()
                results.append(run(SimConfig(gpus=gpus, days=args.days, seed=seed,
                                             mechanics=mech, policy=policy)))
                took.append(time.perf_counter() - start)

            def mean(key: str, rs: list = results) -> float:  # type: ignore[type-arg]
                return statistics.fmean(r[key] for r in rs)

            lost = {c: statistics.fmean(r["lost_time_s"][c] for r in results) for c in CAUSES}
            failed = sum(1 for r in results if r["failed"])
            print(f"| {gpus:,} | {policy} | {mean('ettr'):.3f} | {mean('young_daly_ratio'):.3f} | "
                  f"{mean('interruptions'):.0f} | "
                  + " | ".join(f"{lost[c] / 3600:.1f}" for c in CAUSES)
                  + f" | {failed}/{len(results)} | {statistics.fmean(took):.2f} |")


if __name__ == "__main__":
    main()
