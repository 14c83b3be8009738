"""The store owns only what it names: identity, refusals, scheme-only GC, no leftovers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from checkpoint_fixtures import checkpoint_cache_dir, read_tree, write_tree  # noqa: F401
from click.testing import CliRunner

from workflows.cli import main
from wrapper.checkpoint import CheckpointError, CheckpointStore, mark_complete
from wrapper.checkpoint.ownership import IDENTITY_KEY

REPO = Path(__file__).resolve().parents[1]
SHA = "ab" * 32


def _tree(root: Path, step: int, files: dict[str, bytes]) -> Path:
    if root.exists():
        shutil.rmtree(root)
    write_tree(root, files)
    mark_complete(root, step)
    return root


def _snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under root (links as their target text): to prove nothing changed."""
    found: dict[str, bytes | str] = {}
    for dirpath, dirs, names in os.walk(root):
        for name in dirs + names:
            full = Path(dirpath, name)
            rel = str(full.relative_to(root))
            if full.is_symlink():
                found[rel] = "-> " + os.readlink(full)
            elif full.is_file():
                found[rel] = full.read_bytes()
    return found


def test_first_publish_writes_the_store_identity(tmp_path: Path) -> None:
    store = tmp_path / "store"
    CheckpointStore(str(store)).publish(_tree(tmp_path / "src", 1, {"w": b"1"}))
    identity = json.loads((store / IDENTITY_KEY).read_text())
    assert identity["format"] == "resched-store/1" and len(identity["id"]) == 32


def test_a_nonempty_directory_that_is_not_a_store_is_refused_untouched(tmp_path: Path) -> None:
    # What the issue measured: a folder with objects/ and manifests/ of someone else.
    foreign = tmp_path / "data"
    write_tree(foreign, {f"objects/ab/{SHA}": b"theirs", "manifests/x.json": b"{}",
                         "notes.txt": b"keep me"})
    before = _snapshot(foreign)
    result = CliRunner().invoke(main, ["checkpoint", "publish",
                                       str(_tree(tmp_path / "src", 1, {"w": b"1"})),
                                       str(foreign)])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a resched checkpoint store" in lines[0]
    assert "Traceback" not in result.output
    assert _snapshot(foreign) == before  # not even a lock file was created


@pytest.mark.parametrize("folder", ["objects", "manifests", "objects/ab"])
def test_symlinked_store_folders_are_refused(tmp_path: Path, folder: str) -> None:
    store, outside = tmp_path / "store", tmp_path / "outside"
    api = CheckpointStore(str(store))
    src = _tree(tmp_path / "src", 1, {"w": b"1"})
    api.publish(src)
    write_tree(outside, {SHA: b"not ours", "9-20260101T000000.000000Z-0badc0de.json": b"{}",
                         "x.resched-tmp-" + "0" * 32: b"t"})
    real = store / folder
    (store / folder).parent.mkdir(parents=True, exist_ok=True)
    if real.exists():
        shutil.rmtree(real)
    real.symlink_to(outside, target_is_directory=True)
    before = _snapshot(outside)
    with pytest.raises(CheckpointError, match="symlink"):
        api.publish(_tree(src, 2, {"w": b"2"}))
    assert _snapshot(outside) == before


def test_empty_checkpoints_never_become_latest_nor_evict(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path / "store"), retention=2)
    src = tmp_path / "src"
    store.publish(_tree(src, 1, {"w": b"1"}))
    store.publish(_tree(src, 2, {"w": b"2"}))
    empty = _tree(tmp_path / "empty", 3, {".resched/history.json": b"{}"})
    for _ in range(3):
        with pytest.raises(CheckpointError, match="nothing to publish"):
            store.publish(empty)
    assert [info.step for info in store.list()] == [2, 1]
    restored = store.restore(tmp_path / "out")
    assert restored is not None and restored.step == 2
    assert read_tree(tmp_path / "out") == {"w": b"2"}


def test_gc_deletes_only_names_of_its_own_scheme(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = CheckpointStore(str(root), retention=1)
    src = tmp_path / "src"
    store.publish(_tree(src, 1, {"w": b"1"}))
    own_temp = "objects/.resched-tmp-" + "1" * 32
    foreign = {"objects/ab/README": b"r", "objects/notes.txt": b"n",
               "manifests/notes.json": b"{}", "manifests/by-hand.json": b"{}",
               "mine.resched-tmp-keep": b"k", "sub/" + SHA: b"s"}
    write_tree(root, {**foreign, own_temp: b"torn"})
    result = store.publish(_tree(src, 2, {"w": b"2"}))
    assert result.deleted_manifests == 1 and result.deleted_blobs == 2  # w and the marker
    for key, data in foreign.items():
        assert (root / key).read_bytes() == data, key
    assert not (root / own_temp).exists()


def test_a_store_from_before_identity_files_is_adopted(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = CheckpointStore(str(root))
    src = tmp_path / "src"
    store.publish(_tree(src, 1, {"w": b"1"}))
    (root / IDENTITY_KEY).unlink()
    assert store.publish(_tree(src, 2, {"w": b"2"})).step == 2
    assert (root / IDENTITY_KEY).is_file()


def test_a_failed_publish_removes_its_own_blobs(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = CheckpointStore(str(root))
    src = tmp_path / "src"
    store.publish(_tree(src, 1, {"w": b"1"}))
    before = _snapshot(root)
    _tree(src, 2, {"a": os.urandom(1000), "b": os.urandom(1000)})
    calls = []

    def fail_late(count: int) -> None:  # the second file's progress: the first is stored
        calls.append(count)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
    with pytest.raises(CheckpointError, match="No space left"):
        store.publish(src, progress=fail_late)
    after = _snapshot(root)
    assert {k: v for k, v in after.items() if k != ".lock"} == {
        k: v for k, v in before.items() if k != ".lock"}


_ENOSPC_SCRIPT = textwrap.dedent("""
    import json, os, shutil, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from wrapper.checkpoint import CheckpointError, CheckpointStore, mark_complete
    root, work = Path(sys.argv[1]), Path(sys.argv[3])
    def used():
        return sum(p.stat().st_size for p in (root / "store").rglob("*") if p.is_file())
    def tree(step, files):
        src = work / "src"
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        for name, size in files.items():
            (src / name).write_bytes(os.urandom(size))
        mark_complete(src, step)
        return src
    store = CheckpointStore(str(root / "store"))
    out = {"first": store.publish(tree(1, {"a": 1 << 20})).step, "used_before": used()}
    try:  # 3 x 2 MiB into a 4 MiB filesystem that already holds 1 MiB
        store.publish(tree(2, {"b": 2 << 20, "c": 2 << 20, "d": 2 << 20}))
        out["second"] = "published"
    except CheckpointError as error:
        out["second"] = str(error)
    out["used_after"] = used()
    out["third"] = store.publish(tree(3, {"e": 1 << 20})).step
    out["latest"] = [info.step for info in store.list()]
    print(json.dumps(out))
""")


def test_enospc_on_a_real_small_filesystem_leaves_no_leftovers(tmp_path: Path) -> None:
    """A 4 MiB tmpfs mounted in a private mount namespace (gone with the process)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a private tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = tmp_path / "enospc.py"
    script.write_text(_ENOSPC_SCRIPT)
    flag = "-m" if os.geteuid() == 0 else "-rm"
    probe = subprocess.run(["unshare", flag, "sh", "-c",
                            f"mount -t tmpfs -o size=4m tmpfs {mnt}"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.decode().strip()}")
    proc = subprocess.run(
        ["unshare", flag, "sh", "-c", f'mount -t tmpfs -o size=4m tmpfs "$1" && exec '
         f'"{sys.executable}" "$2" "$1" "$3" "$4"', "sh", str(mnt), str(script), str(REPO),
         str(tmp_path / "work")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "RESCHED_CACHE_DIR": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "No space left on device" in out["second"], out
    assert out["used_after"] == out["used_before"], out  # no blob of the failed publish
    assert out["third"] == 3 and out["latest"] == [3, 1]
