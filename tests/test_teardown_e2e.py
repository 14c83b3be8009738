"""A training that said it finished but whose processes do not exit (gloo teardown under
torchrun): `resched wrap` ends it after --teardown-timeout and counts it complete, with the
finish line in the record. Real processes: a parent that prints the framework's finish
line and a child of it that never exits, both ended."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.supervise_fixtures import REPO, child_env, pid_alive

pytestmark = pytest.mark.e2e

# A "launcher" with one "rank" that hangs after the training printed its last line.
HANGS_AFTER_FINISH = textwrap.dedent("""
    import subprocess, sys, time
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[1], "w").write(str(rank.pid))
    print(" 100%|##########| 20/20 [00:01<00:00, 10.39it/s]", flush=True)
    print(sys.argv[2], flush=True)
    time.sleep(600)
""")


def _wrap(tmp_path: Path, finish_line: str, *extra: str) -> tuple[subprocess.CompletedProcess[str],
                                                                  dict, int]:
    pid_file = tmp_path / "rank.pid"
    done = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(tmp_path / "state"),
         "--node", "n1", *extra, "--",
         sys.executable, "-c", HANGS_AFTER_FINISH, str(pid_file), finish_line],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    records = sorted((tmp_path / "state" / "attempts").glob("*.json"))
    return done, json.loads(records[-1].read_text()), int(pid_file.read_text())


@pytest.mark.parametrize("finish_line", [
    "{'train_runtime': '1.932', 'train_samples_per_second': '41.42', 'train_loss': '3.903'}",
    "`Trainer.fit` stopped: `max_steps=30` reached.",
])
def test_finished_training_whose_processes_hang_is_ended_and_complete(
        tmp_path: Path, finish_line: str) -> None:
    done, record, rank_pid = _wrap(tmp_path, finish_line, "--teardown-timeout", "1")
    assert done.returncode == 0, done.stderr
    assert record["decision"] == "complete"
    assert record["teardown"]["finished_line"] == finish_line
    assert record["teardown"]["ended_after_s"] >= 1.0
    assert record["signal"] is not None  # the wrapper's stop, kept as evidence
    assert not pid_alive(rank_pid)  # the hung rank went with its launcher
    assert "counted complete" in done.stderr


def test_without_a_finish_line_the_hang_is_a_failure_not_a_teardown(tmp_path: Path) -> None:
    done, record, rank_pid = _wrap(tmp_path, "{'loss': '3.9', 'epoch': '1.0'}",
                                   "--teardown-timeout", "1", "--hang-timeout", "2",
                                   "--max-retries", "0", "--max-reschedules", "0")
    assert done.returncode != 0
    assert "teardown" not in record
    assert record["hung"] is True
    assert not pid_alive(rank_pid)
