"""Count how resched answers hostile input, each case in a real, limited process.

Runs every bad input of tests/test_hostile_cli.py (and the wrap environment cases) as
``python -m workflows.cli ...`` with 2 GiB of address space and a time limit, and counts:
clear errors (non-zero, not 70, one error line, no traceback), accepted (exit 0),
tracebacks / exit 70, hangs (killed at the limit), memory blow-ups. ``--source DIR``
runs another tree (e.g. ``git archive <commit>`` of the code before a fix) with the same
table, so before/after are measured the same way.

    python benchmarks/hostile_inputs.py [--source DIR] [--timeout 10] [--jobs 2]
    python benchmarks/hostile_inputs.py --bounded [...]   # the time / memory table
                                                          # (benchmarks/bounded_inputs.py)
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.hostile_helpers import error_lines, fill, make_inputs  # noqa: E402
from tests.test_hostile_cli import CASES, WRAP_ENV  # noqa: E402

MEMORY_LIMIT = 2 << 30


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def classify(args: list[str], env_extra: dict[str, str], source: Path, files: dict[str, str],
             timeout: float) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESCHED_")}
    env.update(env_extra, PYTHONPATH=str(source))
    with tempfile.TemporaryDirectory() as cwd:
        try:
            done = subprocess.run([sys.executable, "-m", "workflows.cli", *fill(args, files)],
                                  capture_output=True, text=True, timeout=timeout, env=env,
                                  cwd=cwd, stdin=subprocess.DEVNULL, preexec_fn=_limit)
        except subprocess.TimeoutExpired:
            return "hang", ""
    output = done.stdout + done.stderr
    if "MemoryError" in output or done.returncode in (-9, 137):
        return "memory", output[-200:]
    if done.returncode == 70 or "Traceback" in output or done.returncode < 0:
        return "traceback/70", output[-200:]
    if done.returncode == 0:
        return "accepted", ""
    if len(error_lines(output)) == 1:
        return "clear", ""
    return "unclear", output[-300:]


def main() -> int:
    if "--bounded" in sys.argv[1:]:
        from benchmarks.bounded_inputs import main as bounded

        return bounded([a for a in sys.argv[1:] if a != "--bounded"])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=REPO)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--verbose", action="store_true")
    options = parser.parse_args()
    runs = [(list(case), {}) for case in CASES] + [(["wrap", "--", "true"], e) for e in WRAP_ENV]
    counts: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        files = make_inputs(Path(tmp))
        with concurrent.futures.ThreadPoolExecutor(options.jobs) as pool:
            results = pool.map(lambda run: classify(run[0], run[1], options.source, files,
                                                    options.timeout), runs)
            for (args, env), (verdict, detail) in zip(runs, results):
                counts[verdict] += 1
                if options.verbose and verdict != "clear":
                    shown = " ".join(args).replace("\n", "\\n")[:90]
                    print(f"{verdict:>13}  {shown} {env or ''} {detail.strip()[-120:]!r}")
    print(f"source {options.source}: {len(runs)} bad inputs tried; "
          + ", ".join(f"{k} {counts[k]}" for k in
                      ("clear", "accepted", "traceback/70", "hang", "memory", "unclear")))
    return 0 if counts["clear"] == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
