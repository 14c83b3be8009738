"""Transient store errors, the single-writer lease, staging and OSMO's plain layout."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import ClassVar

import fsspec
import pytest
from checkpoint_fixtures import checkpoint_cache_dir, read_tree, write_tree  # noqa: F401
from fsspec.implementations.memory import MemoryFileSystem

from wrapper.checkpoint import CheckpointStore, mark_complete, stage_url, upload_plain
from wrapper.checkpoint.errors import CheckpointBusyError, CheckpointError
from wrapper.checkpoint.lease import LEASE_KEY
from wrapper.checkpoint.retry import RetryPolicy, is_transient


class FlakyMemoryFS(MemoryFileSystem):
    """A memory filesystem whose next N calls of chosen methods fail with ConnectionError."""

    protocol = "flakymem"
    store: ClassVar[dict] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]
    failures: ClassVar[dict[str, int]] = {}

    @classmethod
    def fail(cls, method: str, times: int) -> None:
        cls.failures[method] = times

    def _maybe_fail(self, method: str) -> None:
        if self.failures.get(method, 0) > 0:
            self.failures[method] -= 1
            raise ConnectionError(f"injected: {method} connection reset")

    def pipe_file(self, path, value, *args, **kwargs):  # type: ignore[override]
        self._maybe_fail("pipe_file")
        return super().pipe_file(path, value, *args, **kwargs)

    def put_file(self, lpath, rpath, *args, **kwargs):  # type: ignore[override]
        self._maybe_fail("put_file")
        return super().put_file(lpath, rpath, *args, **kwargs)

    def cat_file(self, path, *args, **kwargs):  # type: ignore[override]
        self._maybe_fail("cat_file")
        return super().cat_file(path, *args, **kwargs)


fsspec.register_implementation("flakymem", FlakyMemoryFS, clobber=True)


@pytest.fixture
def flaky_url() -> str:
    FlakyMemoryFS.failures.clear()
    return f"flakymem://ck-{uuid.uuid4().hex}/store"


def _src(tmp_path: Path, step: int, content: bytes = b"w") -> Path:
    src = tmp_path / "src"
    write_tree(src, {"model.pt": content, "sub/opt.pt": content * 2})
    mark_complete(src, step)
    return src


def test_transient_errors_are_retried_with_backoff(flaky_url: str, tmp_path: Path) -> None:
    slept: list[float] = []
    store = CheckpointStore(flaky_url, retry=RetryPolicy(attempts=5, sleep=slept.append))
    src = tmp_path / "one"
    write_tree(src, {"model.pt": b"weights"})
    FlakyMemoryFS.fail("pipe_file", 1)  # the lease write, first thing a publish does
    FlakyMemoryFS.fail("put_file", 2)  # then the one blob upload, twice
    result = store.publish(src, step=1)
    assert result.step == 1 and store.verify().all_ok
    assert slept == [0.5, 0.5, 1.0]  # backoff doubles per failure of the same operation


def test_a_publish_that_finally_fails_leaves_latest_unchanged(flaky_url: str, tmp_path: Path
                                                              ) -> None:
    store = CheckpointStore(flaky_url, retry=RetryPolicy(attempts=3, sleep=lambda s: None))
    store.publish(_src(tmp_path, 1, b"first"))
    FlakyMemoryFS.fail("put_file", 100)
    with pytest.raises(CheckpointError, match=r"failed: upload .*after 3 attempt") as info:
        store.publish(_src(tmp_path, 2, b"second"))
    assert "previous checkpoint is still the latest" in str(info.value)
    FlakyMemoryFS.failures.clear()
    assert [i.step for i in store.list() if i.state == "complete"] == [1]
    restored = store.restore(tmp_path / "out")
    assert restored is not None and restored.step == 1
    assert (tmp_path / "out" / "model.pt").read_bytes() == b"first"


def test_permanent_errors_are_not_retried() -> None:
    assert not is_transient(PermissionError("denied"))
    assert not is_transient(FileNotFoundError("gone"))
    assert is_transient(ConnectionError("reset")) and is_transient(TimeoutError())


def test_a_live_lease_blocks_a_second_writer(tmp_path: Path) -> None:
    url = f"memory://ck-{uuid.uuid4().hex}/store"
    fs = fsspec.filesystem("memory")
    lease = {"owner": "other", "host": "elsewhere", "pid": 1, "expires": 4e9}
    fs.pipe_file(url.removeprefix("memory://") + "/" + LEASE_KEY, json.dumps(lease).encode())
    with pytest.raises(CheckpointBusyError, match="lease held by elsewhere"):
        CheckpointStore(url).publish(_src(tmp_path, 1))


def test_a_dead_owners_lease_is_taken_over(tmp_path: Path) -> None:
    url = f"memory://ck-{uuid.uuid4().hex}/store"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    lease = {"owner": "killed", "host": socket.gethostname(), "pid": int(dead.stdout),
             "expires": 4e9}
    fsspec.filesystem("memory").pipe_file(
        url.removeprefix("memory://") + "/" + LEASE_KEY, json.dumps(lease).encode())
    assert CheckpointStore(url).publish(_src(tmp_path, 1)).step == 1


def test_local_lock_blocks_a_second_writer(tmp_path: Path) -> None:
    import fcntl

    url = str(tmp_path / "store")
    os.makedirs(url)
    with open(os.path.join(url, ".lock"), "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(CheckpointBusyError, match="lock file"):
            CheckpointStore(url).publish(_src(tmp_path, 1))


def test_stage_url_restores_a_store(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/bucket/models"
    CheckpointStore(url).publish(_src(tmp_path, 7))
    staged = stage_url(url, tmp_path / "input0")
    assert staged.kind == "store" and staged.step == 7 and staged.restore is not None
    assert read_tree(tmp_path / "input0") == read_tree(tmp_path / "src")


def test_stage_url_copies_a_plain_tree_and_osmo_layout(tmp_path: Path) -> None:
    models = tmp_path / "tmp" / "models"
    write_tree(models, {"snapshot.pth": b"weights", "logs/a.txt": b"l"})
    assert upload_plain(models, f"file://{tmp_path}/bucket") == 2
    assert (tmp_path / "bucket" / "models" / "snapshot.pth").read_bytes() == b"weights"
    staged = stage_url(f"file://{tmp_path}/bucket/models", tmp_path / "input0")
    assert staged.kind == "tree" and staged.files == 2
    assert read_tree(tmp_path / "input0") == read_tree(models)


def test_upload_plain_regex_and_memory(tmp_path: Path) -> None:
    models = tmp_path / "models"
    write_tree(models, {"snapshot.pth": b"w", "debug.log": b"l"})
    url = f"memory://ck-{uuid.uuid4().hex}"
    assert upload_plain(models, url, regex=r"\.pth$") == 1
    staged = stage_url(f"{url}/models", tmp_path / "in")
    assert staged.kind == "tree" and read_tree(tmp_path / "in") == {"snapshot.pth": b"w"}


def test_stage_url_of_missing_url_gives_empty_dest(tmp_path: Path) -> None:
    staged = stage_url(f"file://{tmp_path}/nothing/here", tmp_path / "in")
    assert staged.kind == "empty" and (tmp_path / "in").is_dir()
    assert list((tmp_path / "in").iterdir()) == []


def test_stage_url_of_a_store_without_a_committed_checkpoint_is_empty(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    write_tree(store_dir, {"objects/ab/" + "ab" * 32: b"orphan"})
    staged = stage_url(str(store_dir), tmp_path / "in")
    assert staged.kind == "empty" and list((tmp_path / "in").iterdir()) == []
