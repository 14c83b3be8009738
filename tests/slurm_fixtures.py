"""The real Slurm for the Slurm backend's tests: ``scripts/slurm-cluster`` on loopback.

One session fixture brings up a two-node cluster (two slurmd on this host, 127.0.0.1)
under a private state dir and port range, exports ``SLURM_CONF``, and stops exactly the
daemons it started at the end. Tests that use it are marked ``slurm``; they are skipped,
with the reason, only when the cluster cannot come up (no root, packages missing and not
installable).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = REPO / "scripts" / "slurm-cluster"
NODES = 2  # slurmctld on the base port, one slurmd on each of the next ones


def free_port_block(count: int, start: int = 17000, stop: int = 30000) -> int:
    """A base port with ``count`` free consecutive ports on 127.0.0.1."""
    for base in range(start + os.getpid() % 997 * 10, stop, count):
        try:
            for port in range(base, base + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free block of ports for the test Slurm")


@dataclass(frozen=True)
class SlurmCluster:
    conf: Path
    env: dict[str, str]  # what a client (and the jobs it submits) needs
    up_seconds: float

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=check)

    def show_job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (JobState, Restarts, ExcNodeList, ...)."""
        text = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait_for_state(
        self, job_id: str, states: set[str], timeout_s: float = 90
    ) -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        info: dict[str, str] = {}
        while time.monotonic() < deadline:
            info = self.show_job(job_id)
            if info.get("JobState") in states:
                return info
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} not in {states} after {timeout_s}s: {info}")


def _cluster_env(state_dir: Path) -> dict[str, str]:
    env = os.environ.copy()
    # Each test session gets its own cluster (state dir, ports): two sessions running at
    # once must not stop each other's daemons or cancel each other's jobs.
    env["RESCHED_SLURM_DIR"] = str(state_dir)
    env["RESCHED_SLURM_PORT"] = str(free_port_block(NODES + 1))
    # Jobs inherit the submitter's environment: resched and this Python must be found.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["RESCHED_PYTHON"] = sys.executable
    return env


def _down(env: dict[str, str], state_dir: Path) -> None:
    subprocess.run(
        [str(CLUSTER_SCRIPT), "down"], env=env, capture_output=True, text=True, check=False
    )
    shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="session", name="slurm_cluster")
def slurm_cluster_fixture() -> Iterator[SlurmCluster]:
    state_dir = Path(tempfile.mkdtemp(prefix="resched-slurm-test-"))
    env = _cluster_env(state_dir)
    started = time.monotonic()
    up = subprocess.run(
        [str(CLUSTER_SCRIPT), "up"], env=env, capture_output=True, text=True, check=False
    )
    up_seconds = time.monotonic() - started
    if up.returncode != 0:
        _down(env, state_dir)  # whatever did start
        pytest.skip(f"the test Slurm cluster did not come up: {up.stderr.strip()[-500:]}")
    conf = state_dir / "slurm.conf"
    env["SLURM_CONF"] = str(conf)
    # sbatch passes the submitter's environment to the job: this process's, in the tests.
    exported = {k: env[k] for k in ("SLURM_CONF", "PATH", "RESCHED_PYTHON")}
    previous = {k: os.environ.get(k) for k in exported}
    os.environ.update(exported)
    try:
        yield SlurmCluster(conf=conf, env=env, up_seconds=up_seconds)
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _down(env, state_dir)
