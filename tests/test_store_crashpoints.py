"""Crash consistency of the checkpoint store, step by step (docs/checkpoint.md).

The matrix: every protocol step x {SIGKILL, SIGINT}, a real child process crashed there
(``RESCHED_CRASHPOINT``), then the invariants checked and the next run's healing
(tests/crash_matrix.py). Beside it, the issue's data-loss paths as black-box tests that
do not rely on the hook: a kill at the k-th rename of a restore (old code renamed file by
file into the target), SIGINT right after `latest` was renamed into place, an unreadable
folder in the source, a restore racing a --retention 1 publish.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from checkpoint_fixtures import S3Server, checkpoint_cache_dir, read_tree, s3_server  # noqa: F401
from crash_matrix import REPO, run_scenario, scenarios

from wrapper.checkpoint import CheckpointStore, mark_complete, read_marker
from wrapper.checkpoint.errors import CheckpointError


@pytest.mark.parametrize(("step", "sig", "variant"), scenarios())
def test_crash_at_every_step_on_file_store(step: str, sig: str, variant: str,
                                           tmp_path: Path) -> None:
    row = run_scenario(tmp_path, "file", f"file://{tmp_path}/store", step, sig, variant,
                       dict(os.environ), None)
    assert row.fired, f"{step} was never reached"  # every step lies on its scenario's path
    assert row.losses == 0 and row.healed


@pytest.mark.s3
@pytest.mark.slow
def test_crash_at_every_step_on_s3(s3_server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    # Every store-side step (publish, commit, GC) and the plain restore from S3 by default;
    # the restore variants that differ only on the local side (--force swap, journaled,
    # start-up) run on file:// above, and here too with RESCHED_CRASH_MATRIX_FULL=1
    # (`python tests/crash_matrix.py s3` prints the whole matrix).
    full = os.environ.get("RESCHED_CRASH_MATRIX_FULL") == "1"
    env = {**s3_server.env, "CK_OPTIONS": json.dumps(s3_server.storage_options)}
    rows = [row for row in scenarios() if full or row[2] in ("publish", "empty")]
    assert {step for step, _, variant in rows if variant == "publish"} >= {
        "commit.before_pointer", "commit.after_pointer", "gc.after_manifests"}
    for index, (step, sig, variant) in enumerate(rows):
        work = tmp_path / f"case{index}"
        work.mkdir()
        row = run_scenario(work, "s3", s3_server.url(f"matrix-{tmp_path.name}-{index}"), step,
                           sig, variant, env, s3_server.storage_options)
        assert row.fired and row.losses == 0, row


# -- the paths, without the hook ------------------------------------------------

KILL_AT_RENAME = r"""
import os, signal, sys
sys.path.insert(0, os.environ["REPO"])
count, limit = [0], int(os.environ["KILL_AT"])
def counted(real):
    def call(*args, **kwargs):
        count[0] += 1
        if count[0] == limit:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
os.replace, os.rename = counted(os.replace), counted(os.rename)
from pathlib import Path
action, url, target = sys.argv[1], sys.argv[2], Path(sys.argv[3])
if action == "startup":
    from wrapper.wrap_checkpoint import CheckpointSession
    print(CheckpointSession(url, target, None).restore())
else:
    from wrapper.checkpoint import CheckpointStore
    CheckpointStore(url).restore(target, allow_nonempty=True)
"""


def _version(root: Path, step: int, count: int = 20) -> dict[str, bytes]:
    files = {f"d{i % 3}/f{i}.bin": f"step {step} file {i} ".encode() + os.urandom(200)
             for i in range(count)}
    for relpath, data in files.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_bytes(data)
    mark_complete(root, step)
    return files


def _kill_at(action: str, url: str, target: Path, k: int) -> int:
    env = {**os.environ, "REPO": str(REPO), "PYTHONPATH": str(REPO), "KILL_AT": str(k)}
    done = subprocess.run([sys.executable, "-c", KILL_AT_RENAME, action, url, str(target)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, -signal.SIGKILL), done.stderr[-2000:]
    return done.returncode


@pytest.mark.parametrize("k", [1, 2, 5, 12])
def test_a_restore_killed_at_any_rename_leaves_old_or_new_and_heals(k: int, tmp_path: Path
                                                                    ) -> None:
    url = f"file://{tmp_path}/store"
    store = CheckpointStore(url)
    v1 = _version(tmp_path / "v1", 1)
    store.publish(tmp_path / "v1")
    target = tmp_path / "target"
    store.restore(target)
    (target / "notes.txt").write_bytes(b"the user's")
    old = {**v1, "notes.txt": b"the user's"}
    v2 = _version(tmp_path / "v2", 2, count=24)
    store.publish(tmp_path / "v2")
    new = {**old, **v2}
    _kill_at("restore", url, target, k)
    assert read_tree(target) in (old, new), "a kill mid-restore left old and new files mixed"
    try:  # publishing that directory gives one of the two versions, or refuses
        again = CheckpointStore(f"file://{tmp_path}/other").publish(target)
        assert again.step in (1, 2)
    except CheckpointError:
        pass
    store.restore(target, allow_nonempty=True)  # the next run heals
    assert read_tree(target) == new
    assert not [p for p in tmp_path.rglob("*") if ".resched-restore-" in p.name
                or ".resched-tmp-" in p.name]


@pytest.mark.parametrize("k", [1, 2, 5])
def test_a_startup_restore_killed_then_restarted_restores_again(k: int, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store"
    v1 = _version(tmp_path / "v1", 1000)
    CheckpointStore(url).publish(tmp_path / "v1")
    target = tmp_path / "ckpt"
    _kill_at("startup", url, target, k)
    env = {**os.environ, "REPO": str(REPO), "PYTHONPATH": str(REPO), "KILL_AT": "0"}
    done = subprocess.run([sys.executable, "-c", KILL_AT_RENAME, "startup", url, str(target)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert read_marker(target) == 1000, done.stderr  # never resumes from half a restore
    assert read_tree(target) == v1


SIGINT_AFTER_COMMIT = r"""
import os, sys
sys.path.insert(0, os.environ["REPO"])
real = os.replace
def replace(src, dst, *args, **kwargs):
    real(src, dst, *args, **kwargs)
    if str(dst).endswith("/latest"):
        raise KeyboardInterrupt  # what SIGINT raises, right after the commit's rename
os.replace = replace
from wrapper.checkpoint import CheckpointStore
CheckpointStore(sys.argv[1], retention=1).publish(sys.argv[2])
"""


def test_sigint_right_after_the_commit_keeps_its_manifest(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store"
    store = CheckpointStore(url, retention=1)
    _version(tmp_path / "v1", 1)
    store.publish(tmp_path / "v1")
    v2 = _version(tmp_path / "v2", 2)
    env = {**os.environ, "REPO": str(REPO), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", SIGINT_AFTER_COMMIT, url, str(tmp_path / "v2")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr
    restored = store.restore(tmp_path / "out")
    assert restored is not None and restored.step == 2 and not restored.fell_back
    assert read_tree(tmp_path / "out") == v2
    assert store.verify().all_ok


def test_a_restore_during_a_retention_1_publish_retries(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`latest` moves (and retention 1 deletes what it named) between the restore's read
    of `latest` and its download: the restore reads `latest` again instead of failing."""
    import wrapper.checkpoint.restore as restore_module

    url = f"file://{tmp_path}/store"
    store = CheckpointStore(url, retention=1)
    _version(tmp_path / "v1", 1)
    store.publish(tmp_path / "v1")
    v2 = _version(tmp_path / "v2", 2)
    real, raced = restore_module.read_manifest, []

    def racing(store_fs, ref):  # type: ignore[no-untyped-def]
        if not raced:
            raced.append(CheckpointStore(url, retention=1).publish(tmp_path / "v2"))
        return real(store_fs, ref)
    monkeypatch.setattr(restore_module, "read_manifest", racing)
    restored = store.restore(tmp_path / "out")
    assert raced and raced[0].deleted_manifests == 1  # the publish retired step 1
    assert restored is not None and restored.step == 2
    assert read_tree(tmp_path / "out") == v2


# -- an unreadable file or folder in the source ------------------------------------------

PUBLISH_CLI = r"""
import os, sys
sys.path.insert(0, os.environ["REPO"])
# Everything the publish imports is loaded first: the interpreter lives under /root,
# which nobody cannot read once the privileges are dropped.
import ctypes, hashlib, json, uuid, socket, fcntl, concurrent.futures
from workflows.cli import main
import workflows.cli.checkpoint_cmds
import wrapper.checkpoint.store, wrapper.checkpoint.publish, wrapper.checkpoint.lease
import wrapper.checkpoint.ownership, wrapper.checkpoint.restore, wrapper.version
if os.environ.get("DROP_TO"):
    uid = int(os.environ["DROP_TO"])
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
sys.argv = ["resched", "checkpoint", "publish", sys.argv[1], sys.argv[2], "--step", "3"]
main()
"""


@pytest.mark.parametrize("what", ["folder", "file"])
def test_an_unreadable_source_path_fails_the_publish_with_one_line(what: str) -> None:
    """Tests run as root, which reads anything: the publish then runs in a child that
    dropped to ``nobody`` (a real EACCES from the kernel), on a tree made for it."""
    base = Path(tempfile.mkdtemp(prefix="resched-eacces-"))
    try:
        src, store_dir, cache = base / "src", base / "store", base / "cache"
        for folder in (src / "ok", src / "locked", store_dir, cache):
            folder.mkdir(parents=True)
        (src / "ok" / "a.bin").write_bytes(b"readable")
        (src / "locked" / "b.bin").write_bytes(b"hidden")
        os.chmod(base, 0o755)
        unreadable = src / "locked" if what == "folder" else src / "locked" / "b.bin"
        drop = os.geteuid() == 0
        if drop:
            for path in [src, *src.rglob("*"), store_dir, cache]:
                os.chown(path, 65534, 65534)
            os.chown(unreadable, 0, 0)
        os.chmod(unreadable, 0o000)
        env = {**os.environ, "REPO": str(REPO), "PYTHONPATH": str(REPO),
               "RESCHED_CACHE_DIR": str(cache), "HOME": str(base),
               "DROP_TO": "65534" if drop else ""}
        done = subprocess.run([sys.executable, "-c", PUBLISH_CLI, str(src), str(store_dir)],
                              env=env, capture_output=True, text=True, timeout=60, cwd=base)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1, done.stderr
        assert len(lines) == 1 and str(unreadable) in lines[0], done.stderr
        assert "Traceback" not in done.stderr
        assert not (store_dir / "latest").exists()
        assert not list((store_dir / "manifests").glob("*")) if (store_dir / "manifests").exists() else True
    finally:
        for path in base.rglob("*"):
            os.chmod(path, 0o755, follow_symlinks=False) if not path.is_symlink() else None
        shutil.rmtree(base, ignore_errors=True)
