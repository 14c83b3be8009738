"""The checkpoint a failed attempt left is published while the next attempt runs.

A plain training script (no resched import) writes a Megatron-style checkpoint
(``iter_N/mp_rank_00/model_optim_rng.pt`` then ``latest_checkpointed_iteration.txt``),
fails with a transient error and is retried in place. The second attempt starts writing
its next checkpoint at once (the unfinished ``iter_0000010/`` beside the finished one)
and then waits until the store's ``latest`` names step 5: it can only see that if the
wrapper published while it ran. The events give the order; a restore from the store
gives back the bytes the training wrote, for both steps.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.supervise_fixtures import REPO, child_env
from wrapper.checkpoint.store import CheckpointStore
from wrapper.wrap_checkpoint import CheckpointSession

pytestmark = pytest.mark.e2e

TRAIN = r'''
import json, os, sys, time
from pathlib import Path

ckpt, store, failed_once = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)

def shard(step, part):
    # 6 MiB of bytes that depend on the step: a torn or mixed copy shows
    return bytes((step * 31 + part + i) % 251 for i in range(256)) * (3 * 8192)

def save(step):
    folder = ckpt / f"iter_{step:07d}" / "mp_rank_00"
    write(folder / "model_optim_rng.pt", shard(step, 0))
    write(folder / "extra_state.pt", shard(step, 1))
    write(ckpt / "latest_checkpointed_iteration.txt", str(step).encode())

def store_latest():
    try:
        return json.loads((store / "latest").read_text())["latest"]
    except (OSError, ValueError, KeyError):
        return ""

if not failed_once.exists():
    save(5)
    print("saved step 5", flush=True)
    failed_once.touch()
    print("RuntimeError: transient glitch", file=sys.stderr, flush=True)
    sys.exit(1)

# attempt 2: the next checkpoint is under way while the last one is being published
write(ckpt / "iter_0000010" / "mp_rank_00" / "model_optim_rng.pt", shard(10, 0))
print("attempt 2 started step 10", flush=True)
deadline = time.monotonic() + 60
while not store_latest().startswith("5-"):
    if time.monotonic() > deadline:
        print("step 5 never reached the store while attempt 2 ran", flush=True)
        sys.exit(2)
    time.sleep(0.02)
print("attempt 2 saw step 5 in the store", flush=True)
save(10)
print("saved step 10", flush=True)
'''


def _events(stderr: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for line in stderr.splitlines():
        if line.startswith("resched: event "):
            _, _, name, payload = line.split(" ", 3)
            found.append((name, json.loads(payload)))
    return found


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.pt"))}


@pytest.mark.parametrize("sync_every", [None, "1h"])
def test_the_last_checkpoint_is_published_during_the_next_attempt(
    tmp_path: Path, sync_every: str | None,
) -> None:
    ckpt, store = tmp_path / "ckpt", tmp_path / "store"
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    sync = ["--sync-every", sync_every] if sync_every else []
    done = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--checkpoint-dir", str(ckpt),
         "--checkpoint-url", f"file://{store}", "--max-retries", "2", *sync, "--",
         sys.executable, str(script), str(ckpt), str(store), str(tmp_path / "failed-once")],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    assert "attempt 2 saw step 5 in the store" in done.stdout, done.stdout + done.stderr
    events = _events(done.stderr)
    names = [name for name, _ in events]
    started = names.index("checkpoint_sync_started")
    attempts = [i for i, name in enumerate(names) if name == "attempt_started"]
    synced = names.index("checkpoint_synced")
    # decided to retry -> the round starts -> attempt 2 starts -> the round ends
    assert names[started - 1] == "decision" and events[started - 1][1]["decision"] == "retry"
    assert attempts[0] < started < attempts[1] < synced
    assert events[started][1]["step"] == 5 and events[synced][1]["step"] == 5
    assert events[synced][1]["t"] < events[-1][1]["t"]  # before attempt 2's decision
    # Nothing lost or torn: the final publish holds step 10; both steps restore byte-exact.
    written = _digests(ckpt)
    assert set(written) == {"iter_0000005/mp_rank_00/model_optim_rng.pt",
                            "iter_0000005/mp_rank_00/extra_state.pt",
                            "iter_0000010/mp_rank_00/model_optim_rng.pt",
                            "iter_0000010/mp_rank_00/extra_state.pt"}
    restored = CheckpointStore(f"file://{store}").restore(tmp_path / "restored")
    assert restored is not None and restored.step == 10
    assert _digests(tmp_path / "restored") == written
    manifest = json.loads((store / "manifests" / f"{events[synced][1]['checkpoint_id']}.json")
                          .read_text())
    names_at_5 = json.dumps(manifest)
    assert "iter_0000005" in names_at_5 and "iter_0000010" not in names_at_5  # unfinished: left out


def test_no_background_round_when_the_store_already_holds_that_step(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    (ckpt / "iter_0000005" / "mp_rank_00").mkdir(parents=True)
    (ckpt / "iter_0000005" / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"w" * 100)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("5")
    session = CheckpointSession(f"file://{tmp_path / 'store'}", tmp_path / "fresh", None)
    CheckpointStore(session.url or "").publish(ckpt, layouts=True)
    assert session.restore() == 5
    assert not session.publish_behind(5, attempt=1)  # the store has it already
    assert not session.publish_behind(None, attempt=1)  # the attempt left no checkpoint
    (tmp_path / "fresh" / "iter_0000007" / "mp_rank_00").mkdir(parents=True)
    (tmp_path / "fresh" / "iter_0000007" / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"x")
    (tmp_path / "fresh" / "latest_checkpointed_iteration.txt").write_text("7")
    assert session.publish_behind(7, attempt=2)
    session.wait_behind()
    assert session.synced_step() == 7
    assert not session.publish_behind(7, attempt=3)
    session.finish()
