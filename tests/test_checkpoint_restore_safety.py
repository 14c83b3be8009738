"""Restore reads only regular files of the store, and every POSIX name round-trips."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest
from checkpoint_fixtures import checkpoint_cache_dir  # noqa: F401
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workflows.cli import main
from wrapper.checkpoint import CheckpointError, CheckpointStore, mark_complete
from wrapper.checkpoint.layout import blob_key

pytestmark = pytest.mark.timeout(120)  # a blocking open of a FIFO would hang forever


def _tree(root: Path, step: int, payload: bytes) -> Path:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / "w.bin").write_bytes(payload)
    mark_complete(root, step)
    return root


def _two_checkpoints(tmp_path: Path) -> tuple[CheckpointStore, Path, Path]:
    """Steps 1 and 2 of the same file; returns (store, root, path of step 2's blob)."""
    root = tmp_path / "store"
    store = CheckpointStore(str(root))
    store.publish(_tree(tmp_path / "src", 1, b"one" * 1000))
    second = b"two" * 1000
    store.publish(_tree(tmp_path / "src", 2, second))
    return store, root, root / blob_key(hashlib.sha256(second).hexdigest())


def _expect_fallback(store: CheckpointStore, out: Path, why: str) -> None:
    result = store.restore(out)
    assert result is not None and result.step == 1 and result.fell_back
    assert why in (result.reason or ""), result.reason
    assert (out / "w.bin").read_bytes() == b"one" * 1000
    assert not [p for p in out.iterdir() if ".resched-tmp-" in p.name]
    verify = store.verify()
    assert not verify.checks[0].ok and verify.checks[1].ok


def test_a_blob_linked_to_an_identical_file_outside_is_never_verified(tmp_path: Path) -> None:
    store, _, blob = _two_checkpoints(tmp_path)
    outside = tmp_path / "outside.bin"
    shutil.copyfile(blob, outside)  # same bytes, same hash: only the link is wrong
    blob.unlink()
    blob.symlink_to(outside)
    _expect_fallback(store, tmp_path / "out", "not a regular file (a symlink)")


def test_a_blob_linked_to_dev_zero_does_not_fill_the_disk(tmp_path: Path) -> None:
    store, _, blob = _two_checkpoints(tmp_path)
    blob.unlink()
    blob.symlink_to("/dev/zero")
    _expect_fallback(store, tmp_path / "out", "symlink")


def test_a_fifo_blob_does_not_hang(tmp_path: Path) -> None:
    store, _, blob = _two_checkpoints(tmp_path)
    blob.unlink()
    os.mkfifo(blob)
    _expect_fallback(store, tmp_path / "out", "a FIFO")


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")
def test_a_device_blob_is_never_opened(tmp_path: Path) -> None:
    store, _, blob = _two_checkpoints(tmp_path)
    blob.unlink()
    os.mknod(blob, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    _expect_fallback(store, tmp_path / "out", "a character device")


def test_a_symlinked_objects_folder_is_damage(tmp_path: Path) -> None:
    store, root, blob = _two_checkpoints(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(blob.parent, copy)
    shutil.rmtree(blob.parent)
    blob.parent.symlink_to(copy, target_is_directory=True)
    _expect_fallback(store, tmp_path / "out", "symlink")


def test_a_blob_longer_than_its_manifest_is_damage(tmp_path: Path) -> None:
    store, _, blob = _two_checkpoints(tmp_path)
    with open(blob, "ab") as handle:
        handle.write(b"x" * 100)
    _expect_fallback(store, tmp_path / "out", "manifest says 3000")


def test_cli_says_it_fell_back(tmp_path: Path) -> None:
    store, _, blob = _two_checkpoints(tmp_path)
    blob.unlink()
    os.mkfifo(blob)
    result = CliRunner().invoke(main, ["checkpoint", "restore", store.url,
                                       str(tmp_path / "out")])
    assert result.exit_code == 0
    assert "fell back past 1 newer checkpoint" in result.stderr and "FIFO" in result.stderr
    assert result.stdout.startswith("restored step 1 ")


def test_only_checkpoint_unsafe_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = CheckpointStore(str(root), retention=1)
    payload = b"solo" * 10
    store.publish(_tree(tmp_path / "src", 1, payload))
    blob = root / blob_key(hashlib.sha256(payload).hexdigest())
    blob.unlink()
    blob.symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match="no complete checkpoint .* passed verification"):
        store.restore(tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


# -- names ----------------------------------------------------------------------------

_NAMED = [b"A:", b"C:evil", b"-rf", b"--help", b"line\nbreak", b"tab\there", b" lead",
          b"trail ", b"\xff\xfe", b"caf\xc3\xa9", b"caf\xe9", b"*?[]", b"$HOME", b"'\"",
          b"x" * 255, b".hidden", b"...", b"latest", b"objects", b"%2F", b"\x1b[31m"]


def _write_bytes_tree(root: Path, names: list[bytes]) -> dict[bytes, bytes]:
    os.makedirs(root)
    files = {}
    for index, name in enumerate(names):
        folder = os.path.join(os.fsencode(root), b"d%d" % (index % 3))
        os.makedirs(folder, exist_ok=True)
        data = name + b"#%d" % index
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(data)
        files[os.path.join(b"d%d" % (index % 3), name)] = data
    mark_complete(root, 7)
    return files


def _read_bytes_tree(root: Path) -> dict[bytes, bytes]:
    found = {}
    base = os.fsencode(root)
    for dirpath, dirs, names in os.walk(base):
        dirs[:] = [d for d in dirs if d != b".resched"]
        for name in names:
            if name == b"resched-complete.json":
                continue
            full = os.path.join(dirpath, name)
            with open(full, "rb") as handle:
                found[os.path.relpath(full, base)] = handle.read()
    return found


def _round_trip(tmp_path: Path, names: list[bytes]) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    for folder in (src, out, tmp_path / "store"):
        shutil.rmtree(folder, ignore_errors=True)
    files = _write_bytes_tree(src, names)
    store = CheckpointStore(str(tmp_path / "store"))
    if any(b"\\" in name for name in names):
        with pytest.raises(CheckpointError, match="backslash"):
            store.publish(src)
        assert store.list() == []  # refused up front: nothing was committed
        return
    assert store.publish(src).files == len(names) + 1
    restored = store.restore(out)
    assert restored is not None and restored.step == 7
    assert _read_bytes_tree(out) == files
    assert store.verify().all_ok


def test_hostile_names_round_trip(tmp_path: Path) -> None:
    _round_trip(tmp_path, _NAMED)


_NAME_BYTES = st.binary(min_size=1, max_size=40).filter(
    lambda b: b"/" not in b and b"\x00" not in b and b not in (b".", b"..")
    and b".resched-tmp-" not in b)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(names=st.lists(_NAME_BYTES, min_size=1, max_size=6, unique=True))
def test_every_posix_name_round_trips_or_is_refused_up_front(tmp_path: Path,
                                                             names: list[bytes]) -> None:
    _round_trip(tmp_path, names)


def test_hashing_a_source_that_shrank_is_a_short_read_not_a_crash(tmp_path: Path) -> None:
    # A training may truncate a file in place while it is published: the hash must see a
    # short read (then the stat comparison refuses the file), never SIGBUS from a mapping.
    from wrapper.checkpoint.hashing import copy_and_digest

    src = tmp_path / "a"
    src.write_bytes(b"x" * 100)
    with open(src, "rb") as source, open(tmp_path / "b", "wb") as target:
        copied, digest = copy_and_digest(source.fileno(), target.fileno(), 1 << 20)
    assert copied == 100 and digest == hashlib.sha256(b"x" * 100).hexdigest()
