"""Pointer files rewritten in place (Megatron's tracker, DeepSpeed's ``latest``) are pinned.

An upload sends the pointer's bytes as the layout read and judged them at the scan, not
the live file: the framework rewriting it at its next save is no change to the
checkpoint being published (before: every periodic publish was refused when a training
saved more often than a publish took). What still refuses: any file of the step folders
the upload read rewritten, replaced or removed (a rotation deleting the folder the pinned
bytes name), and a pointer that changed between the two inspections of one scan. What a
restore gives is always a checkpoint the framework loads: the pointer names a whole
folder that came with it.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from checkpoint_fixtures import (  # noqa: F401
    S3Server,
    checkpoint_cache_dir,
    read_tree,
    s3_server,
)

import wrapper.checkpoint.snapshot as snapshot_module
from tests.pointer_fixtures import (
    DEEPSPEED_HELPERS,
    DEEPSPEED_LATEST,
    HELPER_BYTES,
    MEGATRON_TRACKER,
    SAVERS,
)
from wrapper.checkpoint import CheckpointStore
from wrapper.checkpoint.errors import SnapshotUnstableError
from wrapper.checkpoint.layouts import inspect_layout
from wrapper.checkpoint.snapshot import check_unchanged, prepare_snapshot

POINTER = {"megatron": MEGATRON_TRACKER, "deepspeed": DEEPSPEED_LATEST}


def _folder(layout: str, step: int) -> str:
    return f"iter_{step:07d}" if layout == "megatron" else f"global_step{step}"


def _restored(store: CheckpointStore, target: Path) -> dict[str, bytes]:
    result = store.restore(target)
    assert result is not None and not result.fell_back
    return read_tree(target)


def _consistent(target: Path, layout: str, step: int) -> None:
    """What the framework loads after a restore: the pointer names ``step`` and its
    folder is there and whole (the same rule as every upload and relaunch)."""
    verdict = inspect_layout(target)
    assert (verdict.complete, verdict.step) == (True, step), verdict.reason
    assert (target / _folder(layout, step)).is_dir()


@pytest.mark.parametrize("layout", sorted(SAVERS))
def test_a_pointer_rewritten_during_the_upload_is_published_as_judged(tmp_path: Path,
                                                                      layout: str) -> None:
    """The next save lands while the upload runs (its folder written, the pointer
    rewritten in place): the publish commits the checkpoint it scanned, with the pointer
    bytes read then; a restore gives exactly that, which the layout judges whole."""
    ck, save = tmp_path / "ck", SAVERS[layout]
    save(ck, 1)
    save(ck, 2)
    judged = (ck / POINTER[layout]).read_bytes()
    scanned = read_tree(ck)
    saved: list[int] = []
    once = threading.Lock()  # progress is called from the upload's worker threads

    def next_save_lands(_size: int) -> None:  # called while files are being uploaded
        if once.acquire(blocking=False):
            saved.append(3)
            inode = (ck / POINTER[layout]).stat().st_ino
            save(ck, 3)
            assert (ck / POINTER[layout]).stat().st_ino == inode  # rewritten in place

    store = CheckpointStore(f"file://{tmp_path}/store")
    result = store.publish(ck, layouts=True, progress=next_save_lands)
    assert saved == [3] and result.step == 2
    assert (ck / POINTER[layout]).read_bytes() != judged  # the live pointer moved on
    restored = _restored(store, tmp_path / "restored")
    assert restored == scanned and restored[POINTER[layout]] == judged
    _consistent(tmp_path / "restored", layout, 2)
    again = store.publish(ck, layouts=True)  # the next round takes the next save
    assert again.step == 3
    _consistent_tree = _restored(store, tmp_path / "restored-3")
    assert _consistent_tree[POINTER[layout]] == (ck / POINTER[layout]).read_bytes()
    _consistent(tmp_path / "restored-3", layout, 3)


@pytest.mark.parametrize("layout", sorted(SAVERS))
def test_a_pointer_rewritten_between_scan_and_upload_keeps_the_judged_bytes(
        tmp_path: Path, layout: str) -> None:
    ck, save = tmp_path / "ck", SAVERS[layout]
    save(ck, 4)
    prepared = prepare_snapshot(ck, layouts=True)
    pins = {f.relpath: f.pinned for f in prepared.snapshot.files if f.pinned is not None}
    helpers = {name: HELPER_BYTES for name in DEEPSPEED_HELPERS} if layout == "deepspeed" else {}
    assert pins == {POINTER[layout]: (ck / POINTER[layout]).read_bytes(), **helpers}
    (pinned,) = [f for f in prepared.snapshot.files if f.relpath == POINTER[layout]]
    save(ck, 5)  # after the scan, before any byte is uploaded
    check_unchanged(prepared.snapshot)  # the rewritten pointer is no change to this one
    from wrapper.checkpoint.hashing import HashCache
    from wrapper.checkpoint.publish import publish_snapshot
    from wrapper.checkpoint.retry import RetryPolicy
    from wrapper.checkpoint.storefs import StoreFS

    store = StoreFS(f"file://{tmp_path}/store", retry=RetryPolicy())
    result = publish_snapshot(store, prepared.snapshot, step=prepared.step, retention=2,
                              cache=HashCache(ck, enabled=False))
    assert result.step == 4
    restored = _restored(CheckpointStore(f"file://{tmp_path}/store"), tmp_path / "r")
    assert restored[POINTER[layout]] == pinned.pinned
    assert not any(path.startswith(_folder(layout, 5)) for path in restored)
    _consistent(tmp_path / "r", layout, 4)


@pytest.mark.parametrize("layout", sorted(SAVERS))
def test_a_rotation_deleting_the_pinned_folder_during_the_upload_refuses(tmp_path: Path,
                                                                        layout: str) -> None:
    """The training saves again and its rotation deletes the folder the pinned pointer
    names while the upload runs: nothing is committed (the store keeps its latest), and
    nothing of the refused publish stays behind."""
    ck, save = tmp_path / "ck", SAVERS[layout]
    save(ck, 1)
    store = CheckpointStore(f"file://{tmp_path}/store")
    assert store.publish(ck, layouts=True).step == 1
    save(ck, 2)
    once = threading.Lock()  # progress is called from the upload's worker threads

    def save_and_rotate(_size: int) -> None:
        if once.acquire(blocking=False):
            save(ck, 3)
            for step in (1, 2):  # keep the newest one
                shutil.rmtree(ck / _folder(layout, step))

    with pytest.raises(SnapshotUnstableError, match="changed while it was published|vanished"):
        store.publish(ck, layouts=True, progress=save_and_rotate)
    assert [info.step for info in store.list()] == [1]
    _consistent_restore = _restored(store, tmp_path / "r")
    assert _consistent_restore[POINTER[layout]].strip() in (b"1", b"global_step1")
    _consistent(tmp_path / "r", layout, 1)
    assert store.verify().orphan_blobs == 0 and store.verify().all_ok
    assert store.publish(ck, layouts=True).step == 3  # the next round takes what is there


def test_a_file_of_the_published_folder_rewritten_during_the_upload_refuses(tmp_path: Path
                                                                           ) -> None:
    ck = tmp_path / "ck"
    SAVERS["megatron"](ck, 1)
    once = threading.Lock()

    def rewrite(_size: int) -> None:
        if once.acquire(blocking=False):
            (ck / "iter_0000001" / "__0_0.distcp").write_bytes(b"rewritten in place")

    store = CheckpointStore(f"file://{tmp_path}/store")
    with pytest.raises(SnapshotUnstableError, match="changed while it was published|changed size"):
        store.publish(ck, layouts=True, progress=rewrite)
    assert store.list() == []


def test_a_pointer_moving_between_the_two_inspections_of_a_scan_refuses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout is read before and after the file scan; a pointer that moved in between
    may name a folder the scan saw half-written: the round is skipped (retried soon)."""
    ck = tmp_path / "ck"
    SAVERS["megatron"](ck, 1)
    real = snapshot_module.take_snapshot

    def scan_while_saving(directory: Path, selection: object) -> object:
        scanned = real(directory, selection)  # type: ignore[arg-type]
        SAVERS["megatron"](ck, 2)
        return scanned

    monkeypatch.setattr(snapshot_module, "take_snapshot", scan_while_saving)
    with pytest.raises(SnapshotUnstableError, match="changed while it was scanned"):
        prepare_snapshot(ck, layouts=True)


def test_a_pointer_naming_a_folder_the_scan_lacks_is_not_pinned_but_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth: should a scan ever miss the folder the pointer names (it was
    judged whole before and after the scan), the round is refused, never published as a
    pointer naming a folder the upload does not hold."""
    ck = tmp_path / "ck"
    SAVERS["deepspeed"](ck, 1)
    real = snapshot_module.take_snapshot

    def scan_missing_the_folder(directory: Path, selection: object) -> object:
        scanned = real(directory, selection)  # type: ignore[arg-type]
        files = tuple(f for f in scanned.files if not f.relpath.startswith("global_step1/"))
        from dataclasses import replace
        return replace(scanned, files=files)

    monkeypatch.setattr(snapshot_module, "take_snapshot", scan_missing_the_folder)
    with pytest.raises(SnapshotUnstableError, match="names global_step1/"):
        prepare_snapshot(ck, layouts=True)


@pytest.mark.s3
def test_on_s3_the_pinned_pointer_is_published(s3_server: S3Server, tmp_path: Path  # noqa: F811
                                               ) -> None:
    import uuid

    ck = tmp_path / "ck"
    SAVERS["megatron"](ck, 7)
    judged = (ck / MEGATRON_TRACKER).read_bytes()
    store = CheckpointStore(s3_server.url(f"pin-{uuid.uuid4().hex[:12]}"),
                            storage_options=s3_server.storage_options)
    once = threading.Lock()

    def next_save(_size: int) -> None:
        if once.acquire(blocking=False):
            SAVERS["megatron"](ck, 8)

    assert store.publish(ck, layouts=True, progress=next_save).step == 7
    restored = _restored(store, tmp_path / "r")
    assert restored[MEGATRON_TRACKER] == judged
    _consistent(tmp_path / "r", "megatron", 7)
    assert os.path.exists(ck / "iter_0000008")
