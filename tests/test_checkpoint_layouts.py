"""The framework layouts: what each says about completeness and progress, and what an
upload takes from them while the training runs and after it ended (no resched marker)."""

from __future__ import annotations

import io
import json
import os
import uuid
import zipfile
from pathlib import Path

import pytest
from checkpoint_fixtures import checkpoint_cache_dir, read_tree  # noqa: F401

from wrapper.checkpoint import CheckpointStore
from wrapper.checkpoint.errors import SnapshotUnstableError
from wrapper.checkpoint.layouts import (
    TORN_DIR,
    Layout,
    inspect_layout,
    layout_step,
    megatron_iteration_whole,
)
from wrapper.checkpoint.snapshot import check_unchanged, checkpoint_step, prepare_snapshot


def _w(path: Path, data: bytes | str = b"x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def _megatron_iter(root: Path, n: int, *, whole: bool = True, legacy: bool = False) -> None:
    it = root / f"iter_{n:07d}"
    if legacy:
        _w(it / "mp_rank_00" / "model_optim_rng.pt", f"iter {n}")
        return
    _w(it / "common.pt", f"common {n}")  # megatron.core.dist_checkpointing.save's order
    _w(it / "__0_0.distcp", f"rank0 {n}")
    _w(it / "__1_0.distcp", f"rank1 {n}")
    if whole:
        _w(it / ".metadata", f"meta {n}")
        _w(it / "metadata.json", '{"sharded_backend": "torch_dist", "sharded_backend_version": 1}')


def _zip_bytes(text: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", text)
    return buffer.getvalue()


def test_megatron_async_save_resumes_from_the_tracker_not_the_newer_dir(tmp_path: Path) -> None:
    _megatron_iter(tmp_path, 100)
    _megatron_iter(tmp_path, 200, whole=False)  # async save: files there, tracker not yet
    _w(tmp_path / "latest_checkpointed_iteration.txt", "100")
    verdict = inspect_layout(tmp_path)
    assert (verdict.layout, verdict.complete, verdict.step) == (Layout.MEGATRON, True, 100)
    assert verdict.in_progress == ("iter_0000200",)
    # Even a whole newer dir is not what Megatron resumes from until the tracker says so.
    _w(tmp_path / "iter_0000200" / ".metadata", "meta 200")
    _w(tmp_path / "iter_0000200" / "metadata.json", '{"sharded_backend": "torch_dist"}')
    assert inspect_layout(tmp_path).step == 100
    _w(tmp_path / "latest_checkpointed_iteration.txt", "200\n")
    assert checkpoint_step(tmp_path) == 200 and inspect_layout(tmp_path).in_progress == ()


def test_megatron_legacy_release_and_first_save_under_way(tmp_path: Path) -> None:
    _megatron_iter(tmp_path, 5, legacy=True)
    assert inspect_layout(tmp_path).complete is False  # no tracker: no iteration finished
    _w(tmp_path / "latest_checkpointed_iteration.txt", "5")
    assert layout_step(tmp_path) == 5
    rel = tmp_path / "rel"
    _w(rel / "release" / "mp_rank_00" / "model_optim_rng.pt")
    _w(rel / "latest_checkpointed_iteration.txt", "release")
    assert inspect_layout(rel).complete is True


def test_megatron_tracker_naming_a_torn_dir_is_incomplete(tmp_path: Path) -> None:
    _megatron_iter(tmp_path, 300, whole=False)
    _w(tmp_path / "latest_checkpointed_iteration.txt", "300")
    verdict = inspect_layout(tmp_path)
    assert verdict.complete is False and "iter_0000300" in verdict.reason


@pytest.mark.parametrize("config", [None, b"", b'{"sharded_backend": "torch_d'])
def test_torch_dist_iteration_needs_its_metadata_json_written_last(
        tmp_path: Path, config: bytes | None) -> None:
    """megatron.core.dist_checkpointing.save writes metadata.json after .metadata (its
    metadata_finalize_fn) and load() refuses a folder without a readable one
    (validation.verify_checkpoint_and_load_strategy): a kill in between is a torn save."""
    _megatron_iter(tmp_path, 100)
    _megatron_iter(tmp_path, 200)
    (tmp_path / "iter_0000200" / "metadata.json").unlink()
    if config is not None:
        _w(tmp_path / "iter_0000200" / "metadata.json", config)
    _w(tmp_path / "latest_checkpointed_iteration.txt", "200")
    verdict = inspect_layout(tmp_path)
    assert verdict.complete is False and "iter_0000200" in verdict.in_progress
    assert not megatron_iteration_whole(tmp_path / "iter_0000200")
    assert megatron_iteration_whole(tmp_path / "iter_0000100")
    # a plain torch DCP folder (Megatron's torch_dcp format) has neither file: DCP rule
    dcp = tmp_path / "dcp" / "iter_0000005"
    _w(dcp / "__0_0.distcp")
    _w(dcp / ".metadata", "meta")
    assert megatron_iteration_whole(dcp)


def test_a_restored_copy_with_new_file_times_is_still_whole(tmp_path: Path) -> None:
    _megatron_iter(tmp_path, 7)
    _w(tmp_path / "latest_checkpointed_iteration.txt", "7")
    # restore writes files in any order: .metadata may be older than a .distcp
    os.utime(tmp_path / "iter_0000007" / ".metadata", ns=(10**18, 10**18))
    os.utime(tmp_path / "iter_0000007" / "__0_0.distcp", ns=(2 * 10**18, 2 * 10**18))
    assert inspect_layout(tmp_path).step == 7


@pytest.mark.parametrize("garbage", [b"12abc", b"\xff\xfe\x00", b"-3", b"1e3"])
def test_garbage_tracker_is_one_clear_line_and_falls_back(tmp_path: Path, garbage: bytes) -> None:
    _megatron_iter(tmp_path, 10)
    _w(tmp_path / "latest_checkpointed_iteration.txt", garbage)
    verdict = inspect_layout(tmp_path)
    assert verdict.complete is None and verdict.step is None
    assert len(verdict.warnings) == 1 and "\n" not in verdict.warnings[0]
    assert "latest_checkpointed_iteration.txt" in verdict.warnings[0]
    assert "fix:" in verdict.warnings[0]
    # falls back to "unchanged across the upload": everything is uploaded, nothing raises
    prepared = prepare_snapshot(tmp_path)
    assert prepared.whole and len(prepared.snapshot.files) == 6


def test_tracker_that_is_a_directory_or_huge_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "latest_checkpointed_iteration.txt").mkdir()
    assert inspect_layout(tmp_path).complete is None
    other = tmp_path / "big"
    _w(other / "latest_checkpointed_iteration.txt", "1" * 100000)
    assert inspect_layout(other).warnings


def test_tracker_symlink_is_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "outside.txt"
    _w(secret, "42")
    ck = tmp_path / "ck"
    _megatron_iter(ck, 42)
    os.symlink(secret, ck / "latest_checkpointed_iteration.txt")
    assert inspect_layout(ck).step is None


def test_megatron_non_persistent_global_checkpoint_is_newer(tmp_path: Path) -> None:
    _megatron_iter(tmp_path, 100)
    _w(tmp_path / "latest_checkpointed_iteration.txt", "100")
    _megatron_iter(tmp_path / "non_persistent", 150)
    _megatron_iter(tmp_path / "non_persistent", 175, whole=False)
    _w(tmp_path / "non_persistent" / "latest_checkpointed_iteration.txt", "150")
    verdict = inspect_layout(tmp_path)
    assert verdict.step == 150 and verdict.in_progress == ("non_persistent/iter_0000175",)


def test_dcp_metadata_written_last(tmp_path: Path) -> None:
    _w(tmp_path / "__0_0.distcp")
    assert inspect_layout(tmp_path).complete is False
    _w(tmp_path / ".metadata", "m")
    assert inspect_layout(tmp_path).complete is True
    numbered = tmp_path / "n"
    for step in (10, 20):
        _w(numbered / f"step_{step}" / "__0_0.distcp")
        _w(numbered / f"step_{step}" / ".metadata", "m")
    _w(numbered / "step_30" / "__0_0.distcp")
    verdict = inspect_layout(numbered)
    assert (verdict.step, verdict.in_progress) == (20, ("step_30",))


def test_hf_checkpoint_without_trainer_state_is_torn(tmp_path: Path) -> None:
    _w(tmp_path / "checkpoint-500" / "model.safetensors")
    _w(tmp_path / "checkpoint-500" / "trainer_state.json", json.dumps({"global_step": 500}))
    _w(tmp_path / "checkpoint-1000" / "model.safetensors")
    _w(tmp_path / "checkpoint-1000" / "trainer_state.json", '{"global_step": 10')  # cut
    verdict = inspect_layout(tmp_path)
    assert (verdict.layout, verdict.step, verdict.in_progress) == (
        Layout.HF, 500, ("checkpoint-1000",))


def test_lightning_and_nemo_ckpt(tmp_path: Path) -> None:
    ckdir = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    _w(ckdir / "epoch=0-step=100.ckpt", _zip_bytes("100"))
    _w(ckdir / "last.ckpt", _zip_bytes("100"))
    _w(ckdir / "epoch=1-step=200.ckpt", _zip_bytes("200")[:50])  # torch.save cut short
    verdict = inspect_layout(tmp_path)
    assert (verdict.layout, verdict.step) == (Layout.LIGHTNING, 100)
    assert verdict.in_progress == ("lightning_logs/version_0/checkpoints/epoch=1-step=200.ckpt",)
    nemo = tmp_path / "nemo"
    _w(nemo / "m--val_loss=0.5-step=300-consumed_samples=9600.ckpt", _zip_bytes("300"))
    _w(nemo / "m--val_loss=0.4-step=400-consumed_samples=12800.ckpt", _zip_bytes("400"))
    _w(nemo / "m--val_loss=0.4-step=400-consumed_samples=12800-unfinished", b"")
    verdict = inspect_layout(nemo)
    assert verdict.step == 300 and len(verdict.in_progress) == 2


def test_unknown_layout_is_never_an_error(tmp_path: Path) -> None:
    _w(tmp_path / "state.txt", "7")
    assert inspect_layout(tmp_path).layout is Layout.UNKNOWN
    assert inspect_layout(tmp_path / "missing").layout is Layout.UNKNOWN
    assert checkpoint_step(tmp_path) is None
    assert prepare_snapshot(tmp_path).whole


def torn_in_store(store: CheckpointStore) -> dict[str, bytes]:
    """path -> bytes of the latest checkpoint's files under .resched-torn/ in the store."""
    from wrapper.checkpoint.layout import blob_key, read_manifest, read_pointer

    fs = store._open(None)
    pointer = read_pointer(fs)
    assert pointer is not None and pointer.checkpoints
    manifest = read_manifest(fs, pointer.checkpoints[0])

    def content(entry):  # type: ignore[no-untyped-def]  # a single blob, or a slice of its pack
        if entry.pack is None:
            return fs.read_bytes(blob_key(entry.sha256))
        return (fs.read_bytes(blob_key(entry.pack)) or b"")[entry.offset:entry.offset + entry.size]

    return {e.path: content(e) for e in manifest.files if e.path.startswith(TORN_DIR + "/")}


def test_running_upload_leaves_out_the_save_under_way_final_keeps_it_aside(
        tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _megatron_iter(ck, 100)
    _megatron_iter(ck, 200, whole=False)
    _w(ck / "latest_checkpointed_iteration.txt", "100")
    before = read_tree(ck)
    running = prepare_snapshot(ck)
    assert running.step == 100
    assert not any("iter_0000200" in f.relpath for f in running.snapshot.files)
    store = CheckpointStore(f"memory://ck-{uuid.uuid4().hex}/s")
    assert store.publish(ck, layouts=True).step == 100
    final = store.publish(ck, layouts=True, final=True)
    assert final.step == 100 and final.files == len(before)
    out = tmp_path / "out"
    store.restore(out)
    restored = read_tree(out)
    assert restored["latest_checkpointed_iteration.txt"] == b"100"
    assert restored["iter_0000100/.metadata"] == b"meta 100"
    # kept in the store (listed by `resched checkpoint list`), never restored (issue 19)
    assert not any(p.startswith(TORN_DIR + "/") for p in restored)
    torn = torn_in_store(store)
    assert {p[len(TORN_DIR) + 1:].split("/", 1)[1]: d for p, d in torn.items()} == {
        p: d for p, d in before.items() if p.startswith("iter_0000200/")}
    assert [info.torn_sets for info in store.list()] == [
        (f"{TORN_DIR}/{next(iter(torn)).split('/')[1]}",), ()]
    assert not (out / "iter_0000200").exists()  # Megatron will not see the torn save
    assert read_tree(ck) == before  # the user's files: untouched


def test_running_upload_of_nothing_complete_is_skipped_final_never_replaces_a_complete_one(
        tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _w(ck / "checkpoint-10" / "model.safetensors", "10")
    with pytest.raises(SnapshotUnstableError, match="hf-trainer layout"):
        prepare_snapshot(ck)
    store = CheckpointStore(f"memory://ck-{uuid.uuid4().hex}/s")
    first = store.publish(ck, layouts=True, final=True)  # empty store: what is there goes
    assert first.step is None
    _w(ck / "checkpoint-10" / "trainer_state.json", json.dumps({"global_step": 10}))
    assert store.publish(ck, layouts=True).step == 10
    _w(ck / "checkpoint-20" / "model.safetensors", "20")
    (ck / "checkpoint-10" / "trainer_state.json").unlink()  # the user deleted it: now torn
    with pytest.raises(SnapshotUnstableError, match="store keeps its latest"):
        store.publish(ck, layouts=True, final=True)
    assert [c.step for c in store.list()][0] == 10


def test_regex_selects_files_but_resched_state_travels(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _w(ck / "model.pt")
    _w(ck / "debug.log")
    _w(ck / ".resched" / "history.json", "{}")
    names = {f.relpath for f in prepare_snapshot(ck, regex=r"\.pt$").snapshot.files}
    assert names == {"model.pt", ".resched/history.json"}
    from wrapper.checkpoint.errors import CheckpointError

    with pytest.raises(CheckpointError, match="not a valid regular expression"):
        prepare_snapshot(ck, regex="(")


def test_wrapper_syncer_publishes_a_megatron_save_and_warns_once_on_a_bad_tracker(
        tmp_path: Path) -> None:
    from wrapper.checkpoint import PeriodicSyncer

    ck = tmp_path / "ck"
    _megatron_iter(ck, 100)
    _megatron_iter(ck, 200, whole=False)
    _w(ck / "latest_checkpointed_iteration.txt", "100")
    lines: list[str] = []
    store = CheckpointStore(f"memory://ck-{uuid.uuid4().hex}/s")
    syncer = PeriodicSyncer(ck, store, 3600, settle_s=0, log=lines.append)
    assert syncer.sync_once().step == 100  # type: ignore[union-attr]
    _w(ck / "latest_checkpointed_iteration.txt", "two hundred")
    syncer.sync_once()
    syncer.sync_once()
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 1 and "not an iteration number" in warnings[0]
    _w(ck / "latest_checkpointed_iteration.txt", "100")
    final = syncer.stop()
    assert final is not None and final.step == 100


def test_a_pod_that_has_not_saved_yet_uploads_nothing_at_once(tmp_path: Path) -> None:
    """Only the wrapper's own state (.resched/) in the folder: no empty checkpoint becomes
    the latest, and the round is a skip (immediate), not a failed upload retried 5 times."""
    from wrapper.checkpoint.osmo_upload import UploadKind, upload_checkpoint

    ck = tmp_path / "models"
    _w(ck / ".resched" / "node-0" / "history.json", "{}")
    with pytest.raises(SnapshotUnstableError, match="nothing to upload yet"):
        prepare_snapshot(ck)
    slept: list[float] = []
    url = f"memory://ck-{uuid.uuid4().hex}/s"
    for final in (False, True):
        outcome = upload_checkpoint(ck, url, final=final, sleep=slept.append)
        assert outcome.kind is UploadKind.SKIPPED and "nothing to upload yet" in outcome.reason
    assert slept == [] and CheckpointStore(url).list() == []


def test_a_save_landing_during_a_publish_of_a_whole_layout_is_the_next_ones(tmp_path: Path) -> None:
    """A training that saves more often than a publish takes: the next step's files and
    a relinked last.ckpt appear meanwhile; what the publish read is still the whole
    checkpoint the layout judged, so it commits. A file it read that changed refuses."""
    ck = tmp_path / "ck"
    _w(ck / "epoch=0-step=100.ckpt", _zip_bytes("step 100"))
    os.symlink("epoch=0-step=100.ckpt", ck / "last.ckpt")  # save_last="link"
    prepared = prepare_snapshot(ck, layouts=True)
    assert prepared.whole and prepared.step == 100 and prepared.snapshot.layout_judged
    _w(ck / "epoch=0-step=200.ckpt", _zip_bytes("step 200"))  # the next save, then its link
    os.replace(_relink(ck, "epoch=0-step=200.ckpt"), ck / "last.ckpt")
    check_unchanged(prepared.snapshot)  # no error: not a change to this checkpoint
    store = CheckpointStore(f"file://{tmp_path}/store")
    assert store.publish(ck, layouts=True).step == 200  # the next publish takes the new one
    again = prepare_snapshot(ck, layouts=True)
    _w(ck / "epoch=0-step=200.ckpt", _zip_bytes("step 200, rewritten in place"))
    with pytest.raises(SnapshotUnstableError, match="changed while it was published"):
        check_unchanged(again.snapshot)
    plain = prepare_snapshot(ck, layouts=False)  # no layout judged it: any new file counts
    _w(ck / "notes.txt", "new")
    with pytest.raises(SnapshotUnstableError, match="changed while it was published"):
        check_unchanged(plain.snapshot)


def _relink(folder: Path, target: str) -> Path:
    link = folder / f".last-{uuid.uuid4().hex}"
    os.symlink(target, link)
    return link
