"""scripts/slurm-cluster's promise: ``down`` stops only the daemons it started.

No cluster needed: a state dir whose pid files name processes that are NOT Slurm daemons
(a pid reused by an unrelated program) must leave those processes alone.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "slurm-cluster"


def test_down_never_signals_a_process_it_did_not_start(tmp_path: Path) -> None:
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        for name in ("munged", "slurmctld", "slurmd-node1", "slurmd-node2"):
            (run_dir / f"{name}.pid").write_text(f"{bystander.pid}\n")
        env = {**os.environ, "RESCHED_SLURM_DIR": str(tmp_path)}
        done = subprocess.run(
            [str(SCRIPT), "down"], env=env, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        assert bystander.poll() is None  # still running
        assert "stopped" not in done.stderr
        status = subprocess.run(
            [str(SCRIPT), "status"], env=env, capture_output=True, text=True, check=False
        )
        assert status.returncode == 1 and "slurmctld stopped" in status.stdout
    finally:
        bystander.kill()
        bystander.wait()


def test_unknown_command_prints_usage() -> None:
    done = subprocess.run([str(SCRIPT), "sideways"], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "usage:" in done.stderr
