"""The bounded-input table of issue 21: time and peak memory of each hostile input.

Each case runs ``python -m workflows.cli ...`` of ``--source`` (default: this tree; give
``git archive`` of an older commit to compare) in its own process, with a time limit;
peak memory is GNU time's ``%M`` of the command (else its ``ru_maxrss`` from ``wait4``).

    python benchmarks/hostile_inputs.py --bounded [--source DIR] [--timeout 300]
    python benchmarks/bounded_inputs.py [--source DIR] [--timeout 300] [--line-mib 1024]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# GNU time measures its own child: a child of this driver would also count the driver's
# memory at fork time in its ru_maxrss (Linux carries it over exec).
_PEAK = "RESCHED_PEAK_KIB"
_TIME = ["/usr/bin/time", "-f", f"{_PEAK} %M"] if Path("/usr/bin/time").exists() else []
EVIL_RULES = """version: 1
rules:
  - {id: team/evil, category: network, decision: retry, match: {patterns: ['(a+)+$']}}
"""


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]  # after `python -m workflows.cli`
    env: dict[str, str]
    sigterm_after: float | None = None  # seconds; then measure how long it takes to end


@dataclass(frozen=True)
class Result:
    seconds: float
    peak_mib: float
    exit_code: int | str
    last_line: str


def run_case(case: Case, source: Path, cwd: Path, timeout: float) -> Result:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESCHED_")}
    env.update(case.env, PYTHONPATH=str(source))
    started = time.monotonic()
    with open(cwd / "out.txt", "wb") as out:
        proc = subprocess.Popen([*_TIME, sys.executable, "-m", "workflows.cli", *case.argv],
                                cwd=cwd,
                                env=env, stdout=subprocess.DEVNULL, stderr=out,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        signalled = None
        hwm: list[int] = []
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            now = time.monotonic()
            if case.sigterm_after is not None and signalled is None \
                    and now - started >= case.sigterm_after:
                for child in _children(proc.pid) or [proc.pid]:  # resched, not `time`
                    os.kill(child, signal.SIGTERM)
                signalled = now
            if now > deadline:  # `time` dies too: take the peak from /proc first
                hwm = [_vm_hwm_kib(child) for child in _children(proc.pid)]
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
    ended = time.monotonic()
    proc.returncode = os.waitstatus_to_exitcode(status)
    code: int | str = "timeout" if ended > deadline else proc.returncode
    text = (cwd / "out.txt").read_text(errors="replace").strip().splitlines()
    peak_kib = float(max(hwm)) if code == "timeout" and hwm else float(usage.ru_maxrss)
    for line in text:
        if line.startswith(_PEAK):
            peak_kib = float(line.split()[1])
    text = [line for line in text if not line.startswith(_PEAK)
            and not line.startswith("Command exited with")]
    last = next((line for line in reversed(text) if line.startswith("resched: error")),
                text[-1] if text else "")
    seconds = ended - (signalled if signalled is not None else started)
    return Result(seconds, peak_kib / 1024, code, last[:110])


def _vm_hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def make_cases(tmp: Path, line_mib: int) -> list[Case]:
    rules = tmp / "evil.yaml"
    rules.write_text(EVIL_RULES)
    evil_log = tmp / "evil.log"
    evil_log.write_text(("xx " + "a" * 60 + "!\n") * 100)
    long_log = tmp / "long.log"
    with long_log.open("wb") as handle:
        handle.write(b"start\n")
        block = b"x" * (1 << 20)
        for _ in range(line_mib):
            handle.write(block)
        handle.write(b" NCCL error\nend\n")
    spec = tmp / "spec.yaml"
    tasks = "".join(f"  - name: t{i}\n    image: ubuntu\n    command: [sh, -c, 'echo {i}']\n"
                    for i in range(85000))
    spec.write_text("workflow:\n  name: big\n  tasks:\n" + tasks)
    spec_mb = spec.stat().st_size / 1e6
    emit = (f"head -c {line_mib << 20} /dev/zero | tr '\\0' x; echo; "
            "echo 'NCCL error: unhandled system error' >&2; exit 1")
    pure_re = {"RESCHED_PREFILTER": "re"}
    return [
        Case(f"classify, a {line_mib} MiB log line", ["classify", "--log", str(long_log),
             "--exit-code", "1"], {}),
        Case(f"wrap, the training prints a {line_mib} MiB line", ["wrap", "--state-dir",
             str(tmp / "state1"), "--node", "n1", "--max-retries", "0", "--", "sh", "-c", emit], {}),
        Case("classify, user rule (a+)+$, pure-re prefilter", ["classify", "--log", str(evil_log),
             "--exit-code", "1", "--rules", str(rules)], pure_re),
        Case("classify, user rule (a+)+$, no RE2", ["classify", "--log", str(evil_log),
             "--exit-code", "1", "--rules", str(rules)], {**pure_re, "RESCHED_REGEX_ENGINE": "re"}),
        Case("wrap + rule (a+)+$: SIGTERM at 3 s -> exit", ["wrap", "--state-dir",
             str(tmp / "state2"), "--node", "n1", "--grace", "2", "--rules", str(rules), "--",
             "sh", "-c", f"cat {evil_log}; sleep 600"], pure_re, sigterm_after=3.0),
        Case(f"validate, {spec_mb:.1f} MB spec (85k tasks)", ["validate", str(spec)], {}),
        Case(f"render, {spec_mb:.1f} MB spec", ["render", str(spec)], {}),
        Case("simulate --gpus 8 --days 1e308", ["simulate", "--gpus", "8", "--days", "1e308"], {}),
        Case("simulate --gpus 1000000000000", ["simulate", "--gpus", "1000000000000"], {}),
    ]


def main(argv: list[str] | None = None,
         emit: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=REPO)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--line-mib", type=int, default=1024)
    parser.add_argument("--only", default="", help="run the cases whose name holds this text")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        emit(f"source {options.source}; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        emit(f"| {'input':52} | {'time s':>7} | {'peak MiB':>8} | exit | last line")
        emit(f"|{'-' * 54}|{'-' * 9}|{'-' * 10}|------|----------")
        for case in make_cases(tmp, options.line_mib):
            if options.only not in case.name:
                continue
            work = tmp / "cwd"
            work.mkdir(exist_ok=True)
            result = run_case(case, options.source, work, options.timeout)
            emit(f"| {case.name:52} | {result.seconds:7.2f} | {result.peak_mib:8.0f} | "
                 f"{result.exit_code!s:>4} | {result.last_line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
