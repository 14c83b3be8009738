"""kill -9 of a publishing process at random moments never loses the last checkpoint.

A child process writes checkpoints (each file says its step) and publishes them in a
loop; the test SIGKILLs it after a random delay, then checks: ``latest`` (once one
existed) is still there, restores, verifies, and every restored file belongs to the
restored step; the next publish removes all garbage the kill left.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkpoint_fixtures import S3Server, checkpoint_cache_dir, s3_server  # noqa: F401

from wrapper.checkpoint import CheckpointStore, mark_complete, read_marker

REPO = Path(__file__).resolve().parents[1]

PUBLISHER = r"""
import json, os, random, sys
from pathlib import Path
from wrapper.checkpoint import CheckpointStore, mark_complete, read_marker
src, url, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
options = json.loads(os.environ.get("CK_STORAGE_OPTIONS") or "null")
store = CheckpointStore(url, retention=2, storage_options=options)
rng = random.Random(seed)
src.mkdir(parents=True, exist_ok=True)
step = (read_marker(src) or 0) + 1000 * seed
print("ready", flush=True)
while True:
    step += 1
    for k in range(6):
        tmp = src / f"shard{k}.bin.tmp"
        tmp.write_bytes(f"step {step} ".encode() + rng.randbytes(rng.randint(0, 200_000)))
        os.replace(tmp, src / f"shard{k}.bin")
    mark_complete(src, step)
    store.publish(src)
"""


def _check_after_kill(store: CheckpointStore, out: Path, had_latest: bool) -> bool:
    restored = store.restore(out)
    if restored is None:
        assert not had_latest, "a kill lost the latest checkpoint"
        return False
    assert not restored.fell_back, restored.reason
    assert read_marker(out) == restored.step
    for shard in out.glob("shard*.bin"):
        assert shard.read_bytes().startswith(f"step {restored.step} ".encode()), shard
    assert store.verify().all_ok
    return True


def _check_next_publish_cleans(store: CheckpointStore, clean: Path, step: int,
                               local_root: Path | None) -> None:
    (clean / "w.bin").write_bytes(os.urandom(1000))
    mark_complete(clean, step)
    store.publish(clean)
    assert all(info.state == "complete" for info in store.list())
    assert store.verify().orphan_blobs == 0
    if local_root is not None:
        assert not [p for p in local_root.rglob("*") if ".resched-tmp-" in p.name]


def _kill_loop(tmp_path: Path, url: str, iterations: int, env: dict[str, str],
               storage_options: dict | None, max_delay_s: float,
               local_root: Path | None) -> tuple[int, int]:
    rng = random.Random(int(os.environ.get("RESCHED_KILL_SEED", "7")))
    store = CheckpointStore(url, retention=2, storage_options=storage_options)
    src, clean = tmp_path / "src", tmp_path / "clean"
    clean.mkdir()
    had_latest, kills_mid_run = False, 0
    for iteration in range(iterations):
        child = subprocess.Popen([sys.executable, "-c", PUBLISHER, str(src), url,
                                  str(iteration + 1)], cwd=REPO, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline().strip() == "ready", (
            child.stderr.read() if child.stderr else "")
        time.sleep(rng.uniform(0.0, max_delay_s))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        kills_mid_run += child.returncode == -signal.SIGKILL
        out = tmp_path / f"out{iteration}"
        had_latest = _check_after_kill(store, out, had_latest) or had_latest
        if iteration % 3 == 2:
            _check_next_publish_cleans(store, clean, 10**9 + iteration, local_root)
    return kills_mid_run, iterations


@pytest.mark.slow
def test_kill_minus_9_during_publish_on_file_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed, total = _kill_loop(tmp_path, f"file://{root}", 30, env, None, 0.3, root)
    assert killed == total  # every child died by the signal, mid-loop
    assert CheckpointStore(f"file://{root}").list()


@pytest.mark.s3
@pytest.mark.slow
def test_kill_minus_9_during_publish_on_s3(tmp_path: Path, s3_server: S3Server) -> None:  # noqa: F811
    env = {**s3_server.env, "PYTHONPATH": str(REPO),
           "CK_STORAGE_OPTIONS": json.dumps(s3_server.storage_options)}
    url = s3_server.url(f"kill-{os.getpid()}-{tmp_path.name}")
    killed, total = _kill_loop(tmp_path, url, 6, env, s3_server.storage_options, 1.5, None)
    assert killed == total
    assert CheckpointStore(url, storage_options=s3_server.storage_options).list()
