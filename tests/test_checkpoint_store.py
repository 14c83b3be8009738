"""CheckpointStore on file://, plain paths and fsspec's memory filesystem."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from checkpoint_fixtures import checkpoint_cache_dir, read_tree, write_tree  # noqa: F401

from wrapper.checkpoint import CheckpointStore, mark_complete, read_marker
from wrapper.checkpoint.errors import CheckpointError, SnapshotUnstableError, UnsafePathError
from wrapper.checkpoint.layout import blob_key, read_pointer
from wrapper.checkpoint.retry import RetryPolicy
from wrapper.checkpoint.storefs import StoreFS


@pytest.fixture(params=["file", "path", "memory"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    if request.param == "path":
        return str(tmp_path / "store")
    return f"memory://ck-{uuid.uuid4().hex}/store"


def _tree(root: Path, step: int, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write_tree(root, files)
    mark_complete(root, step)
    return root


def _raw(url: str) -> StoreFS:
    return StoreFS(url, retry=RetryPolicy(attempts=1))


def test_publish_restore_round_trip(url: str, tmp_path: Path) -> None:
    files = {"model.pt": os.urandom(5000), "sub/dir/opt.pt": b"x" * 100, "empty": b""}
    src = _tree(tmp_path / "src", 12, files)
    store = CheckpointStore(url)
    published = store.publish(src)
    assert (published.step, published.files, published.uploaded_files) == (12, 4, 4)
    restored = store.restore(tmp_path / "out")
    assert restored is not None and restored.step == 12 and not restored.fell_back
    assert read_tree(tmp_path / "out") == read_tree(src)
    assert read_marker(tmp_path / "out") == 12
    assert [i.step for i in store.list()] == [12] and store.list()[0].latest
    assert store.verify().all_ok


def test_restore_of_empty_store_is_none(url: str, tmp_path: Path) -> None:
    assert CheckpointStore(url).restore(tmp_path / "out") is None


def test_step_argument_wins_and_no_marker_gives_none(url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_tree(src, {"a": b"1"})
    store = CheckpointStore(url)
    assert store.publish(src).step is None
    write_tree(src, {"a": b"2"})
    assert store.publish(src, step=40).step == 40


def test_incremental_sends_only_changed_files(url: str, tmp_path: Path) -> None:
    big = {f"shard{i}.bin": os.urandom(20000) for i in range(5)}
    src = _tree(tmp_path / "src", 1, big)
    store = CheckpointStore(url)
    store.publish(src)
    again = store.publish(src)
    assert not again.changed and again.uploaded_files == 0
    (src / "shard3.bin").write_bytes(os.urandom(20000))
    mark_complete(src, 2)
    third = store.publish(src)
    assert third.changed and third.uploaded_files == 2  # shard3 + the marker
    assert third.uploaded_bytes < 21000


def test_retention_keeps_last_k_and_gc_removes_unreferenced_blobs(url: str, tmp_path: Path
                                                                   ) -> None:
    store = CheckpointStore(url, retention=2)
    src = tmp_path / "src"
    for step in range(1, 5):
        _tree(src, step, {"w": f"weights {step}".encode(), "const": b"same"})
        store.publish(src)
    infos = store.list()
    assert [(i.step, i.state) for i in infos] == [(4, "complete"), (3, "complete")]
    raw = _raw(url)
    blobs = {k for k in raw.list_files("objects/")}
    assert len(blobs) == 5  # const + (w, marker) of steps 3 and 4
    restored = store.restore(tmp_path / "out")
    assert restored is not None and restored.step == 4


def test_corrupted_blob_falls_back_and_says_so(url: str, tmp_path: Path) -> None:
    store = CheckpointStore(url)
    src = tmp_path / "src"
    _tree(src, 1, {"w": b"one" * 100})
    store.publish(src)
    _tree(src, 2, {"w": b"two" * 100})
    store.publish(src)
    pointer = read_pointer(_raw(url))
    assert pointer is not None
    newest = pointer.checkpoints[0].checkpoint_id
    sha = _sha_of(url, newest, "w")
    _raw(url).write_bytes(blob_key(sha), b"TWO" * 100)  # same size, other bytes
    result = store.restore(tmp_path / "out")
    assert result is not None and result.step == 1
    assert result.fell_back_from == (newest,)
    assert result.reason is not None and "does not match its manifest" in result.reason
    assert (tmp_path / "out" / "w").read_bytes() == b"one" * 100
    assert not any(".resched-tmp-" in p.name for p in (tmp_path / "out").rglob("*"))
    verdict = store.verify()
    assert not verdict.ok and verdict.checks[1].ok


def test_all_checkpoints_damaged_is_a_clear_error(url: str, tmp_path: Path) -> None:
    store = CheckpointStore(url)
    src = _tree(tmp_path / "src", 1, {"w": b"data"})
    store.publish(src)
    pointer = read_pointer(_raw(url))
    assert pointer is not None
    _raw(url).delete(blob_key(_sha_of(url, pointer.checkpoints[0].checkpoint_id, "w")))
    with pytest.raises(CheckpointError, match="no complete checkpoint .* passed verification"):
        store.restore(tmp_path / "out")
    assert not (tmp_path / "out" / "w").exists()


def test_restore_into_nonempty_dir_must_be_explicit(url: str, tmp_path: Path) -> None:
    store = CheckpointStore(url)
    store.publish(_tree(tmp_path / "src", 3, {"w": b"new"}))
    out = tmp_path / "out"
    write_tree(out, {"w": b"old", "notes.txt": b"mine"})
    with pytest.raises(CheckpointError, match="not empty"):
        store.restore(out)
    assert (out / "w").read_bytes() == b"old"
    store.restore(out, allow_nonempty=True)
    assert (out / "w").read_bytes() == b"new" and (out / "notes.txt").read_bytes() == b"mine"


def test_symlink_in_source_is_refused(url: str, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", 1, {"w": b"x"})
    (tmp_path / "secret").write_text("s")
    (src / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(UnsafePathError, match="symlink"):
        CheckpointStore(url).publish(src)
    assert CheckpointStore(url).list() == []


def test_a_link_to_a_file_beside_it_goes_up_as_that_file(url: str, tmp_path: Path) -> None:
    # Lightning's save_last="link": last.ckpt is a relative link to the newest step file
    src = tmp_path / "src"
    write_tree(src, {"epoch=0-step=8.ckpt": b"eight", "sub/a": b"a"})
    (src / "last.ckpt").symlink_to("epoch=0-step=8.ckpt")
    (src / "sub" / "up").symlink_to("../sub/../epoch=0-step=8.ckpt")  # resolves inside
    store = CheckpointStore(url)
    store.publish(src, step=8)
    out = tmp_path / "out"
    store.restore(out)
    assert (out / "last.ckpt").read_bytes() == b"eight" and not (out / "last.ckpt").is_symlink()
    assert (out / "sub" / "up").read_bytes() == b"eight"
    assert os.readlink(src / "last.ckpt") == "epoch=0-step=8.ckpt"  # the source untouched


def test_a_marked_checkpoint_with_a_link_beside_its_file_is_publishable(tmp_path: Path) -> None:
    # the marker records what the publish reads for such a link: its target's stat
    src = tmp_path / "src"
    write_tree(src, {"epoch=0-step=8.ckpt": b"eight"})
    (src / "last.ckpt").symlink_to("epoch=0-step=8.ckpt")
    mark_complete(src, 8)
    store = CheckpointStore(f"file://{tmp_path}/store")
    assert store.publish(src).step == 8
    (src / "epoch=0-step=8.ckpt").write_bytes(b"rewritten")  # the target changed
    with pytest.raises(SnapshotUnstableError, match="differ from the completion marker"):
        store.publish(src)


@pytest.mark.parametrize("make", ["outside", "escape", "dangling", "directory", "via-outside"])
def test_links_that_leave_the_checkpoint_or_name_no_file_are_refused(
        make: str, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", 1, {"w": b"x", "d/f": b"f"})
    (tmp_path / "secret").write_text("s")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "w").write_text("outside")
    target = {"outside": str(tmp_path / "secret"), "escape": "../secret", "dangling": "nothing",
              "directory": "d", "via-outside": "../elsewhere/w"}[make]
    (src / "link").symlink_to(target)
    url = f"file://{tmp_path}/store"
    with pytest.raises(UnsafePathError, match="symlink"):
        CheckpointStore(url).publish(src)
    assert CheckpointStore(url).list() == []


def test_half_written_checkpoint_is_refused(url: str, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", 1, {"w": b"x", "opt": b"o"})
    (src / "w").write_bytes(b"y")  # the next checkpoint has begun: w changed, no new marker
    with pytest.raises(SnapshotUnstableError, match="differ from the completion marker"):
        CheckpointStore(url).publish(src)
    (src / "w.tmp").write_bytes(b"z")
    mark_complete(src, 2)
    (src / "w.tmp").rename(src / "new")  # renamed in after the marker: not in its list
    with pytest.raises(SnapshotUnstableError, match="e.g. new"):
        CheckpointStore(url).publish(src)
    assert CheckpointStore(url).list() == []


def test_marker_without_file_list_uses_times(url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_tree(src, {"w": b"x", "resched-complete.json": b'{"step": 4}'})
    os.utime(src / "resched-complete.json", ns=(1, 1))  # marker older than the files
    with pytest.raises(SnapshotUnstableError, match="newer than the completion marker"):
        CheckpointStore(url).publish(src)
    os.utime(src / "w", ns=(1, 1))
    assert CheckpointStore(url).publish(src).step == 4


def test_restored_dir_is_publishable_again(url: str, tmp_path: Path) -> None:
    store = CheckpointStore(url)
    store.publish(_tree(tmp_path / "src", 6, {"w": b"x", "d/o": b"o"}))
    store.restore(tmp_path / "out")
    again = store.publish(tmp_path / "out")
    assert again.step == 6 and not again.changed  # the re-stamped marker alone is no news


@pytest.mark.parametrize("evil", ["../escape", "/etc/passwd", "a/../../b",
                                  "a\\..\\b", "a//b", "./a", ""])
def test_path_traversal_manifest_is_refused(evil: str, tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    store = CheckpointStore(url)
    store.publish(_tree(tmp_path / "src", 1, {"w": b"x"}))
    _tamper_manifest(url, lambda files: files + [[evil, 1, "0" * 64]])
    with pytest.raises(UnsafePathError):
        store.restore(tmp_path / "out")
    assert not (tmp_path / "escape").exists()


def test_restore_refuses_a_symlink_in_the_target(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    store = CheckpointStore(url)
    store.publish(_tree(tmp_path / "src", 1, {"sub/w": b"x"}))
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (out / "sub").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError, match="in the way"):
        store.restore(out, allow_nonempty=True)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_torn_publish_never_becomes_latest_and_is_cleaned(url: str, tmp_path: Path) -> None:
    store = CheckpointStore(url)
    src = _tree(tmp_path / "src", 1, {"w": b"first"})
    store.publish(src)
    raw = _raw(url)
    # What a publish killed after its manifest but before the pointer leaves behind:
    orphan = "ab" * 32
    raw.write_bytes(blob_key(orphan), b"half")
    torn = json.loads(raw.read_bytes(_manifest_key(url, 0)) or b"{}")
    torn_id = "9-20260101T000000.000000Z-0badc0de"  # the shape publish names them
    torn["id"], torn["step"], torn["time"] = torn_id, 9, torn["time"] + 1
    raw.write_bytes(f"manifests/{torn_id}.json", json.dumps(torn).encode())
    assert [(i.step, i.state) for i in store.list()] == [(9, "torn"), (1, "complete")]
    assert store.restore(tmp_path / "out").step == 1  # type: ignore[union-attr]
    _tree(src, 2, {"w": b"second"})
    result = store.publish(src)
    assert result.deleted_manifests == 1 and result.deleted_blobs >= 1
    assert [i.state for i in store.list()] == ["complete", "complete"]
    assert store.verify().orphan_blobs == 0


def test_osmo_layout_lands_under_the_base_name(tmp_path: Path) -> None:
    base = tmp_path / "bucket"
    store = CheckpointStore(f"file://{base}", osmo_layout=True)
    store.publish(_tree(tmp_path / "models", 5, {"snapshot.pth": b"w"}))
    assert (base / "models" / "latest").is_file()
    plain = CheckpointStore(f"file://{base}/models")
    assert plain.list()[0].step == 5
    out = tmp_path / "again" / "models"
    assert store.restore(out) is not None and (out / "snapshot.pth").read_bytes() == b"w"


def test_bad_retention_is_a_clear_error() -> None:
    with pytest.raises(CheckpointError, match="retention must be an integer >= 1"):
        CheckpointStore("/tmp/x", retention=0)


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        CheckpointStore(str(tmp_path / "store")).publish(tmp_path / "nope")


def _manifest_key(url: str, index: int) -> str:
    pointer = read_pointer(_raw(url))
    assert pointer is not None
    return f"manifests/{pointer.checkpoints[index].checkpoint_id}.json"


def _sha_of(url: str, checkpoint_id: str, relpath: str) -> str:
    data = json.loads(_raw(url).read_bytes(f"manifests/{checkpoint_id}.json") or b"{}")
    return next(sha for path, _, sha in data["files"] if path == relpath)


def _tamper_manifest(url: str, change) -> None:
    """Rewrite the latest manifest AND its hash in the pointer (a deliberate attacker)."""
    import hashlib

    raw = _raw(url)
    key = _manifest_key(url, 0)
    data = json.loads(raw.read_bytes(key) or b"{}")
    data["files"] = change(data["files"])
    body = json.dumps(data).encode()
    raw.write_bytes(key, body)
    pointer = json.loads(raw.read_bytes("latest") or b"{}")
    pointer["checkpoints"][0]["manifest_sha256"] = hashlib.sha256(body).hexdigest()
    raw.write_bytes("latest", json.dumps(pointer).encode())



def test_duplicate_contents_upload_and_download_once(url: str, tmp_path: Path) -> None:
    same = os.urandom(50000)
    src = _tree(tmp_path / "src", 1, {"a.bin": same, "deep/b.bin": same, "c.bin": same})
    store = CheckpointStore(url)
    assert store.publish(src).uploaded_files == 2  # one blob for the three files + marker
    store.restore(tmp_path / "out")
    assert read_tree(tmp_path / "out") == read_tree(src)


def test_damaged_latest_manifest_is_replaced_by_the_next_publish(url: str, tmp_path: Path
                                                                  ) -> None:
    store = CheckpointStore(url)
    src = _tree(tmp_path / "src", 1, {"w": b"one"})
    store.publish(src)
    store.publish(_tree(src, 2, {"w": b"two"}))
    _raw(url).write_bytes(_manifest_key(url, 0), b"garbage")
    again = store.publish(src)  # same content as the damaged latest: must commit anew
    assert again.changed and again.step == 2
    assert store.verify().ok
    assert store.restore(tmp_path / "out").step == 2  # type: ignore[union-attr]
