"""Many small files: packed (test_store_packs.py), the in-memory copy path
(<= SMALL_FILE) and one syncfs instead of a fsync per file; the speed is measured by
``benchmarks/store_scale.py --small-files N``, here only correctness."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from checkpoint_fixtures import checkpoint_cache_dir, read_tree, write_tree  # noqa: F401

from wrapper.checkpoint import CheckpointStore, mark_complete
from wrapper.checkpoint.hashing import SMALL_FILE, copy_small
from wrapper.checkpoint.storefs import SYNCFS_FROM


def test_many_small_files_and_a_large_one_round_trip(tmp_path: Path) -> None:
    files = {f"d{i % 7}/f{i}.bin": os.urandom(i % 90) for i in range(SYNCFS_FROM + 300)}
    files["big.bin"] = os.urandom(SMALL_FILE + 12345)  # the kernel-copy path beside them
    files["dup.bin"] = files["d1/f1.bin"]  # one content, two names: one blob
    write_tree(tmp_path / "src", files)
    mark_complete(tmp_path / "src", 5)
    store = CheckpointStore(f"file://{tmp_path}/store")
    result = store.publish(tmp_path / "src")
    assert result.files == len(files) + 1  # + the marker
    assert store.verify().all_ok
    restored = store.restore(tmp_path / "out")
    assert restored is not None and restored.step == 5
    assert read_tree(tmp_path / "out") == files
    # the small files (and the marker) in one pack; the large and the empty file alone
    blobs = {p.name for p in (tmp_path / "store" / "objects").rglob("*") if p.is_file()}
    assert len(blobs) == 3
    assert {hashlib.sha256(files["big.bin"]).hexdigest(), hashlib.sha256(b"").hexdigest()} < blobs


def test_copy_small_copies_and_hashes_exactly_the_bytes(tmp_path: Path) -> None:
    data = os.urandom(70)
    (tmp_path / "a").write_bytes(data)
    src = os.open(tmp_path / "a", os.O_RDONLY)
    dst = os.open(tmp_path / "b", os.O_WRONLY | os.O_CREAT, 0o644)
    short = os.open(tmp_path / "c", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        assert copy_small(src, dst, 70) == (70, hashlib.sha256(data).hexdigest())
        # a file truncated under the copy gives fewer bytes: the caller refuses it
        assert copy_small(src, short, 100)[0] == 70
    finally:
        for fd in (src, dst, short):
            os.close(fd)
    assert (tmp_path / "b").read_bytes() == data


def test_a_restore_into_the_working_directory_keeps_it(tmp_path: Path,
                                                       monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Renaming a staged tree over the current directory would leave the process in a
    deleted one: there the journaled swap is used, and the directory stays the same."""
    write_tree(tmp_path / "src", {"a.bin": b"x" * 70})
    mark_complete(tmp_path / "src", 1)
    store = CheckpointStore(f"file://{tmp_path}/store")
    store.publish(tmp_path / "src")
    here = tmp_path / "here"
    here.mkdir()
    before = os.stat(here).st_ino
    monkeypatch.chdir(here)
    store.restore(Path("."))
    assert os.stat(".").st_ino == before and Path("a.bin").read_bytes() == b"x" * 70
    assert not [p for p in here.iterdir() if ".resched-restore-" in p.name]
