"""Packs of small files (wrapper/checkpoint/packs.py, manifest format 2) and the stores
written before them (format 1): round trips, dedup, GC, verify, damage, the old format."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from checkpoint_fixtures import S3Server, checkpoint_cache_dir, read_tree, s3_server, write_tree  # noqa: F401
from store_v1_fixture import FIXTURE, STEPS, expected_tree

from wrapper.checkpoint import CheckpointStore, mark_complete
from wrapper.checkpoint.errors import CheckpointError, SnapshotUnstableError
from wrapper.checkpoint.layout import blob_key, read_manifest, read_pointer
from wrapper.checkpoint.manifest import FORMAT, PACKED_FORMAT, Manifest
from wrapper.checkpoint.packs import PACK_MIN_FILES, PACK_TARGET, PACKED_MAX, read_small


def _small_tree(count: int, tag: str = "") -> dict[str, bytes]:
    files = {f"d{i % 5}/f{i:03d}.json": f'{{"i": {i}{tag}}}'.encode() for i in range(count)}
    files["dup-a.bin"] = files["dup-b.bin"] = b"the same bytes twice"
    files["big.bin"] = os.urandom(PACKED_MAX + 100)
    files["empty.bin"] = b""
    return files


def _publish(root: Path, files: dict[str, bytes], step: int, store: CheckpointStore):  # type: ignore[no-untyped-def]
    shutil.rmtree(root, ignore_errors=True)
    write_tree(root, files)
    mark_complete(root, step)
    return store.publish(root)


def _latest(store: CheckpointStore, index: int = 0) -> Manifest:
    fs = store._open(None)
    pointer = read_pointer(fs)
    assert pointer is not None
    return read_manifest(fs, pointer.checkpoints[index])


def _blobs(root: Path) -> set[str]:
    return {p.name for p in (root / "objects").rglob("*") if p.is_file()}


def test_small_files_go_into_one_pack_and_round_trip(tmp_path: Path) -> None:
    files = _small_tree(40)
    store = CheckpointStore(f"file://{tmp_path}/store")
    _publish(tmp_path / "src", files, 1, store)
    manifest = _latest(store)
    packed = [e for e in manifest.files if e.pack]
    assert len(manifest.packs) == 1 and len(packed) == 43  # 40 + dup-a, dup-b + the marker
    assert {e.path for e in manifest.files if not e.pack} == {"big.bin", "empty.bin"}
    dup = {e.path: e for e in packed if e.path.startswith("dup-")}
    assert dup["dup-a.bin"].offset == dup["dup-b.bin"].offset  # one content stored once
    pack = manifest.packs[0]
    assert _blobs(tmp_path / "store") == {pack.sha256, hashlib.sha256(files["big.bin"]).hexdigest(),
                                          hashlib.sha256(b"").hexdigest()}
    raw = (tmp_path / "store" / blob_key(pack.sha256)).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == pack.sha256 and len(raw) == pack.size
    assert json.loads((tmp_path / "store" / "manifests" / f"{manifest.checkpoint_id}.json")
                      .read_bytes())["format"] == PACKED_FORMAT
    assert store.verify().all_ok
    assert store.restore(tmp_path / "out") is not None
    assert read_tree(tmp_path / "out") == files


def test_a_few_small_files_stay_single_blobs_in_format_1(tmp_path: Path) -> None:
    files = {f"f{i}.txt": f"file {i}".encode() for i in range(PACK_MIN_FILES - 2)}
    store = CheckpointStore(f"file://{tmp_path}/store")
    _publish(tmp_path / "src", files, 1, store)
    manifest = _latest(store)
    assert not manifest.packs and not any(e.pack for e in manifest.files)
    assert json.loads((tmp_path / "store" / "manifests" / f"{manifest.checkpoint_id}.json")
                      .read_bytes())["format"] == FORMAT


def test_many_files_fill_several_packs(tmp_path: Path) -> None:
    files = {f"f{i:03d}.bin": os.urandom(PACKED_MAX // 2) for i in range(2 * PACK_TARGET // (PACKED_MAX // 2) + 3)}
    store = CheckpointStore(f"file://{tmp_path}/store")
    _publish(tmp_path / "src", files, 1, store)
    assert len(_latest(store).packs) >= 2
    assert store.verify().all_ok
    store.restore(tmp_path / "out")
    assert read_tree(tmp_path / "out") == files


def test_unchanged_small_files_are_not_sent_again_and_gc_keeps_their_pack(
        tmp_path: Path) -> None:
    store = CheckpointStore(f"file://{tmp_path}/store", retention=1, hash_cache=False)
    files = _small_tree(40)
    _publish(tmp_path / "src", files, 1, store)
    first_pack = _latest(store).packs[0].sha256
    files["d1/f001.json"] = b"changed"
    second = _publish(tmp_path / "src", files, 2, store)
    assert second.uploaded_files == 2  # the changed file and the marker, in a new pack
    manifest = _latest(store)
    by_path = {e.path: e for e in manifest.files}
    assert by_path["d2/f002.json"].pack == first_pack  # referenced where it lies
    assert by_path["d1/f001.json"].pack != first_pack
    assert first_pack in _blobs(tmp_path / "store")  # retention 1, yet still referenced
    assert store.verify().all_ok and store.verify().orphan_blobs == 0
    store.restore(tmp_path / "out")
    assert read_tree(tmp_path / "out") == files
    # a checkpoint that no longer uses the first pack: GC removes it
    fresh = {f"n{i:02d}.txt": f"new {i}".encode() for i in range(PACK_MIN_FILES)}
    _publish(tmp_path / "src", fresh, 3, store)
    assert first_pack not in _blobs(tmp_path / "store")
    assert store.verify().all_ok and store.verify().orphan_blobs == 0


def test_a_damaged_pack_is_named_by_verify_and_restore_falls_back(tmp_path: Path) -> None:
    store = CheckpointStore(f"file://{tmp_path}/store", retention=2, hash_cache=False)
    old = _small_tree(30, tag=", \"v\": 1")
    _publish(tmp_path / "src", old, 1, store)
    _publish(tmp_path / "src", _small_tree(30, tag=", \"v\": 2"), 2, store)
    manifest = _latest(store)
    victim = next(e for e in manifest.files if e.path == "d3/f003.json")
    assert victim.pack is not None and victim.pack != _latest(store, 1).packs[0].sha256
    blob = tmp_path / "store" / blob_key(victim.pack)
    data = bytearray(blob.read_bytes())
    data[victim.offset] ^= 0xFF  # same size, one file's bytes wrong
    os.chmod(blob, 0o644)
    blob.write_bytes(bytes(data))
    checks = {c.step: c for c in store.verify().checks}
    assert not checks[2].ok and checks[1].ok
    assert any(p.startswith("d3/f003.json:") for p in checks[2].problems)
    restored = store.restore(tmp_path / "out")
    assert restored is not None and restored.step == 1 and restored.fell_back
    assert read_tree(tmp_path / "out") == old
    blob.unlink()  # a missing pack: named, and the older checkpoint still restores
    assert any("missing" in p for p in {c.step: c for c in store.verify().checks}[2].problems)
    again = store.restore(tmp_path / "again")
    assert again is not None and again.step == 1


def test_a_pack_of_the_wrong_size_is_never_read(tmp_path: Path) -> None:
    store = CheckpointStore(f"file://{tmp_path}/store", hash_cache=False)
    _publish(tmp_path / "src", _small_tree(20), 1, store)
    pack = _latest(store).packs[0]
    with open(tmp_path / "store" / blob_key(pack.sha256), "ab") as handle:
        handle.write(b"x")
    assert any("bytes, manifest says" in p for p in store.verify().checks[0].problems)
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        store.restore(tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("change", ["beyond", "index", "format1"])
def test_a_tampered_packed_entry_is_refused(tmp_path: Path, change: str) -> None:
    store = CheckpointStore(f"file://{tmp_path}/store")
    _publish(tmp_path / "src", _small_tree(20), 1, store)
    manifest = _latest(store)
    data = json.loads(manifest.to_bytes())
    entry = next(item for item in data["files"] if len(item) == 5)
    if change == "beyond":
        entry[4] = data["packs"][0][1]  # starts at the pack's end
    elif change == "index":
        entry[3] = 7
    else:
        data["format"] = FORMAT  # a format-1 reader never trusts packed entries
    with pytest.raises(CheckpointError, match="malformed"):
        Manifest.from_bytes(json.dumps(data).encode(), where="m")


def test_a_file_that_changes_while_it_is_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"12345")
    assert read_small(str(path), 5) == b"12345"
    path.write_bytes(b"123456")  # the snapshot saw 5 bytes
    with pytest.raises(SnapshotUnstableError):
        read_small(str(path), 5)
    os.mkfifo(tmp_path / "fifo")  # never waited on
    with pytest.raises(SnapshotUnstableError):
        read_small(str(tmp_path / "fifo"), 0)


def test_a_store_written_in_format_1_restores_and_takes_packed_checkpoints(
        tmp_path: Path) -> None:
    """tests/fixtures/store-v1 was written by resched before packs (commit 7cc4d1c)."""
    root = tmp_path / "store"
    shutil.copytree(FIXTURE, root)
    store = CheckpointStore(f"file://{root}", retention=3, hash_cache=False)
    old_blobs = _blobs(root)
    for index, step in enumerate(reversed(STEPS)):
        manifest = _latest(store, index)
        assert manifest.step == step and not manifest.packs
    assert store.verify().all_ok
    restored = store.restore(tmp_path / "v2")
    assert restored is not None and restored.step == 2 and not restored.fell_back
    assert read_tree(tmp_path / "v2") == expected_tree(2)
    # a new version publishes into it: packs beside the old single blobs, which are
    # reused where the content is the same
    files = {**expected_tree(3), **{f"extra/e{i}.txt": f"e{i}".encode() for i in range(20)}}
    result = _publish(tmp_path / "src", files, 3, store)
    manifest = _latest(store)
    assert manifest.packs and result.step == 3
    reused = [e for e in manifest.files if e.pack is None and e.sha256 in old_blobs]
    assert reused  # shards unchanged since step 1 or 2: their old blobs, not re-sent
    assert store.verify().all_ok and store.verify().orphan_blobs == 0
    assert old_blobs & _blobs(root)  # still referenced by the kept old checkpoints
    store.restore(tmp_path / "v3")
    assert read_tree(tmp_path / "v3") == files
    # the oldest format-1 checkpoint still restores from the mixed store
    fs = store._open(None)
    pointer = read_pointer(fs)
    assert pointer is not None and [r.step for r in pointer.checkpoints] == [3, 2, 1]


@pytest.mark.s3
def test_packs_round_trip_on_s3(s3_server: S3Server, tmp_path: Path) -> None:  # noqa: F811
    store = CheckpointStore(s3_server.url(f"packs-{tmp_path.name}"), retention=1,
                            storage_options=s3_server.storage_options, hash_cache=False)
    files = _small_tree(60)
    first = _publish(tmp_path / "src", files, 1, store)
    assert first.files == len(files) + 1
    first_pack = _latest(store).packs[0].sha256
    assert store.verify().all_ok
    store.restore(tmp_path / "out")
    assert read_tree(tmp_path / "out") == files
    fresh = {f"n{i:02d}.txt": f"new {i}".encode() for i in range(PACK_MIN_FILES)}
    _publish(tmp_path / "src", fresh, 2, store)
    verify = store.verify()
    assert verify.all_ok and verify.orphan_blobs == 0
    fs = store._open(None)
    assert not fs.exists(blob_key(first_pack))  # collected: no kept manifest names it
    store.restore(tmp_path / "out2")
    assert read_tree(tmp_path / "out2") == fresh


def test_a_restore_stamps_the_marker_with_what_a_scan_of_the_tree_finds(tmp_path: Path) -> None:
    # The restore re-stamps the marker from the fstat of each file it wrote, not from a
    # second walk: the list must be exactly what checkpoint_files() would record, with
    # the names the marker leaves out (temp files, .resched/, restore leftovers) too.
    from wrapper.checkpoint.marker import checkpoint_files, marker_data
    from wrapper.checkpoint.snapshot import check_publishable, take_snapshot

    files = _small_tree(PACK_MIN_FILES + 4)
    files.update({"deep/er/x.bin": b"x", "d0/keep.resched-tmp-1": b"t",
                  ".resched/state.json": b"{}", "top.resched-tmp-2": b"t",
                  ".resched-restore-" + "a" * 32 + "/f": b"l"})
    store = CheckpointStore(f"file://{tmp_path}/store")
    src = tmp_path / "src"
    write_tree(src, files)
    mark_complete(src, 7)
    store.publish(src)
    manifest = _latest(store)
    out = tmp_path / "out"
    assert store.restore(out) is not None
    stamped = (marker_data(out) or {})["files"]
    assert stamped == checkpoint_files(out)
    names = {e.path for e in manifest.files}
    assert {"deep/er/x.bin", "d0/f000.json"} <= set(stamped) and not set(stamped) - names
    assert (marker_data(out) or {})["step"] == 7
    check_publishable(take_snapshot(out), now_ns=0, settle_s=0)  # publishable again


def test_marker_covers_agrees_with_a_scan(tmp_path: Path) -> None:
    from wrapper.checkpoint.marker import MARKER_NAME, checkpoint_files, marker_covers

    names = ["a.bin", "d/a.bin", "d/.resched/x", ".resched/x", "d/x.resched-tmp-1",
             "x.resched-tmp-1", MARKER_NAME, f"d/{MARKER_NAME}", ".resched-restore-" + "b" * 32
             + ".commit", "d/.resched-restore-" + "c" * 32 + ".commit", "a.resched-tmp-1/y"]
    write_tree(tmp_path, {name: b"1" for name in names})
    assert {name for name in names if marker_covers(name)} == set(checkpoint_files(tmp_path))


@pytest.mark.parametrize("path", ["", "/", "a", "a/b", "/a", "a/", "a//b", ".", "..", "./a",
                                  "a/.", "a/..", "..a", "a..", ".a/b", "a\\b", "a\x00b",
                                  "\udcff", "a\ud800b", "é/ü", "a/./b", "...", 5, None])
def test_the_bulk_manifest_check_accepts_and_refuses_what_the_entry_check_does(path: object
                                                                               ) -> None:
    # A 100k-entry manifest is checked in bulk (manifest._entries); it must accept
    # exactly the entries _entry accepts, and build the same ones.
    from wrapper.checkpoint.manifest import Pack, _entries, _entry

    packs, sha = (Pack("a" * 64, 100),), "b" * 64
    for item in ([path, 3, sha], [path, 3, sha, 0, 10], [path, 3, sha + "\n"],
                 [path, True, sha], [path, 3, sha, 0, 98], [path, 3, sha, 1, 0],
                 [path, 3, "B" * 64], [path, 3]):
        items = [["ok", 1, sha], item]
        outcomes = []
        for check in (lambda found: tuple(_entry(i, packs, "m") for i in found),
                      lambda found: _entries(found, packs, "m")):
            try:
                outcomes.append(check(items))
            except (CheckpointError, ValueError, TypeError) as error:
                outcomes.append(type(error))
        assert outcomes[0] == outcomes[1], item
