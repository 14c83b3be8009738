"""`--chaos slow:TASK=FACTOR`: parsing, and a real process made slower (a ratio against an
identical process that is left alone, measured in the same run; no absolute timing)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workflows.backends.local import proctree
from workflows.backends.local.chaos import ChaosError, parse_chaos
from workflows.backends.local.inject import Throttle

TASKS = ("master", "worker_1")


def test_slow_items_parse() -> None:
    plan = parse_chaos("slow:worker_1=4,slow:master=1.5@30s,slow:master=2@2ckpt", TASKS)
    first, second, third = plan.faults
    assert (first.kind, first.task, first.factor, first.at_s) == ("slow", "worker_1", 4.0, 0.0)
    assert (second.factor, second.at_s) == (1.5, 30.0)
    assert (third.factor, third.after_ckpt) == (2.0, 2)
    assert first.describe() == "slow:worker_1=4@0s"


@pytest.mark.parametrize("item", ["slow:worker_1", "slow:worker_1=1", "slow:worker_1=x",
                                  "slow:worker_1=1000", "slow:nobody=4", "kill:master",
                                  "random:mtbf=10s,kinds=slow"])
def test_bad_slow_items_are_one_clear_error(item: str) -> None:
    with pytest.raises(ChaosError) as error:
        parse_chaos(item, TASKS)
    assert item.split(",")[0] in str(error.value) or "slow" in str(error.value)


# CPU-bound, like a training step: a duty cycle slows work, not a sleep (whose timer runs on)
# The count is replaced atomically: a reader must never see the file truncated (an empty
# read would count as 0 and make either side of the ratio wrong)
COUNTER = ("import os, sys\nn = 0\nwhile True:\n    n += 1\n    sum(range(20000))\n"
           "    open(sys.argv[1] + '.tmp', 'w').write(str(n))\n"
           "    os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n")


def start(tmp_path: Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    counter = tmp_path / "counter.py"
    counter.write_text(COUNTER)
    out = tmp_path / f"{name}.count"
    env = dict(os.environ, **{proctree.TOKEN_ENV: f"slow-test-{name}-{os.getpid()}"})
    top = subprocess.Popen(["sh", "-c", f'"{sys.executable}" "{counter}" "{out}"; exit 0'],
                           env=env, start_new_session=True)
    return top, out


def count(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


@pytest.mark.e2e
def test_throttle_slows_the_workload_and_leaves_it_running(tmp_path: Path) -> None:
    slow_top, slow_out = start(tmp_path, "slowed")
    free_top, free_out = start(tmp_path, "free")
    try:
        deadline = time.monotonic() + 30
        while not (count(slow_out) and count(free_out)):
            assert time.monotonic() < deadline, "the counters never started"
            time.sleep(0.05)
        throttle = Throttle(f"slow-test-slowed-{os.getpid()}", slow_top.pid, factor=4.0)
        thread = threading.Thread(target=throttle.run, daemon=True)
        base_slow, base_free = count(slow_out), count(free_out)
        thread.start()
        while count(free_out) - base_free < 300:  # a window of the free counter's own work
            assert time.monotonic() < deadline + 60, "the free counter stopped"
            time.sleep(0.05)
        slowed, free = count(slow_out) - base_slow, count(free_out) - base_free
        assert slowed < 0.6 * free, (slowed, free)  # 4x slower expected; generous bound
    finally:
        for top in (slow_top, free_top):
            os.killpg(top.pid, 9)
            top.wait()
    thread.join(timeout=10)
    assert not thread.is_alive()  # it ends with the processes it throttled


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2:].split()[0]


def _throttles_of(top_pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"workflows.backends.local.throttle" in argv and str(top_pid).encode() in argv:
            found.append(int(entry.name))
    return found


@pytest.mark.e2e
def test_the_throttle_process_dies_with_the_executor_and_leaves_the_workload_running(
        tmp_path: Path) -> None:
    """The executor starts the throttle as a process of its own; when the executor is
    SIGKILLed mid-cycle, the throttle ends too and never leaves the workload stopped."""
    top, out = start(tmp_path, "orphaned")
    try:
        deadline = time.monotonic() + 30
        while not count(out):
            assert time.monotonic() < deadline, "the counter never started"
            time.sleep(0.05)
        token = f"slow-test-orphaned-{os.getpid()}"
        executor = subprocess.Popen([sys.executable, "-c", (
            "import sys, time\n"
            "from workflows.backends.local.inject import start_throttle\n"
            f"start_throttle({token!r}, {top.pid}, 8.0)\n"
            "time.sleep(60)\n")], env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1])))
        while not _throttles_of(top.pid):
            assert time.monotonic() < deadline, "no throttle process started"
            time.sleep(0.05)
        time.sleep(0.5)  # some duty cycles
        executor.kill()
        executor.wait()
        while _throttles_of(top.pid):
            assert time.monotonic() < deadline + 30, "the throttle outlived the executor"
            time.sleep(0.05)
        workers = [p.pid for p in proctree.task_processes(token).values()]
        assert workers and all(_state(pid) != "T" for pid in workers)  # none left stopped
        before = count(out)
        while count(out) <= before:  # and it runs on
            assert time.monotonic() < deadline + 60, "the workload stayed stopped"
            time.sleep(0.05)
    finally:
        os.killpg(top.pid, 9)
        top.wait()
