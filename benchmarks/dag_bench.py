"""``resched run`` on the workflow DAG: independent groups in parallel, as OSMO runs them.

Not a test: it prints a ratio against a baseline measured in the same run.

    .venv/bin/python benchmarks/dag_bench.py [--groups 4] [--seconds 3] [--repeat 3]

- baseline: one group whose task sleeps S seconds;
- DAG: N independent groups, each the same task, run by the same executor.
The ratio wall(DAG) / wall(baseline) is ~1 when the groups run in parallel and ~N when
they run one at a time (as ``resched run`` did before the DAG). A third case chains two
groups (``inputs: - task:``): ~2, since the consumer waits for its producer.
Medians of ``--repeat`` rounds; the cases take turns within each round.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

RESCHED = str(Path(sys.executable).parent / "resched")


def spec(groups: int, seconds: float, chained: bool = False) -> str:
    lines = ["workflow:", "  name: bench", "  groups:"]
    for i in range(groups):
        lines += [f"  - name: g{i}", "    tasks:", f"    - name: t{i}",
                  f'      command: ["sleep", "{seconds:g}"]']
        if chained and i > 0:
            lines += ["      inputs:", f"      - task: t{i - 1}"]
    return "\n".join(lines) + "\n"


def wall(text: str, directory: Path) -> float:
    path = directory / f"wf-{time.monotonic_ns()}.yaml"
    path.write_text(text)
    started = time.monotonic()
    done = subprocess.run([RESCHED, "run", str(path), "--workdir", str(path.with_suffix("")),
                           "--progress", "quiet"], capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"resched run failed: {done.stdout}{done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cases = {
        "baseline (1 group)": spec(1, args.seconds),
        f"DAG ({args.groups} independent groups)": spec(args.groups, args.seconds),
        "chain (2 groups, task: input)": spec(2, args.seconds, chained=True),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory(prefix="resched-dag-bench-") as tmp:
        for _ in range(args.repeat):
            for name, text in cases.items():
                samples[name].append(wall(text, Path(tmp)))
    base = statistics.median(samples["baseline (1 group)"])
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:38s} median {median:6.2f} s   ratio to baseline {median / base:5.2f}")
    print(textwrap.dedent(f"""\
        parallel groups: ratio ~1 (one at a time would be ~{args.groups}); chain: ~2"""))


if __name__ == "__main__":
    main()
