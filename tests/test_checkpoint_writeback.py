"""start_writeback: the early writeback kick used by publish and restore is best effort:
it never changes the bytes, and a descriptor it cannot act on (a pipe, a closed fd) is
ignored rather than failing a publish."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from wrapper.checkpoint import hashing


def test_kick_on_a_written_file_keeps_its_bytes(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    path = tmp_path / "blob"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        hashing.start_writeback(fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()


def test_kick_on_what_it_cannot_sync_is_ignored() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"x")
    hashing.start_writeback(write_end)  # ESPIPE from the kernel: ignored
    os.close(write_end)
    assert os.read(read_end, 1) == b"x"  # the pipe was left as it was
    os.close(read_end)
    hashing.start_writeback(read_end)  # EBADF: ignored too


def test_copy_and_digest_still_copies_and_hashes(tmp_path: Path) -> None:
    data = os.urandom(5 << 20) + b"tail"
    source, target = tmp_path / "src", tmp_path / "dst"
    source.write_bytes(data)
    src_fd = os.open(source, os.O_RDONLY)
    dst_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        copied, sha = hashing.copy_and_digest(src_fd, dst_fd, len(data))
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    assert copied == len(data)
    assert sha == hashlib.sha256(data).hexdigest()
    assert target.read_bytes() == data


# ---- EarlyWriteback: syncfs during a many-file restore's staging --------------------

def test_early_writeback_syncs_the_folders_filesystem_until_the_staging_ends(tmp_path: Path) -> None:
    import threading

    from wrapper.checkpoint.storefs import SYNCFS_FROM, EarlyWriteback

    calls: list[int] = []
    twice = threading.Event()

    def syncfs(fd: int) -> int:
        assert os.fstat(fd).st_ino == os.stat(tmp_path).st_ino  # the staging folder's fs
        calls.append(fd)
        if len(calls) >= 2:
            twice.set()
        return 0

    with EarlyWriteback(tmp_path, files=SYNCFS_FROM, interval=0.001, syncfs=syncfs):
        assert twice.wait(60)  # it keeps syncing while the staging runs
    # and stops when the staging ends: the thread is joined, nothing of it is left
    assert not [t for t in threading.enumerate() if t.name == "resched-writeback"]


def test_early_writeback_does_nothing_for_few_files(tmp_path: Path) -> None:
    from wrapper.checkpoint.storefs import SYNCFS_FROM, EarlyWriteback

    import threading

    calls: list[int] = []
    with EarlyWriteback(tmp_path, files=SYNCFS_FROM - 1, interval=0.001,
                        syncfs=lambda fd: calls.append(fd) or 0):
        # no thread was started, so nothing can call syncfs
        assert not [t for t in threading.enumerate() if t.name == "resched-writeback"]
    assert calls == []


def test_restore_of_many_files_with_early_writeback_is_byte_identical(tmp_path: Path) -> None:
    from wrapper.checkpoint import CheckpointStore, mark_complete
    from wrapper.checkpoint.storefs import SYNCFS_FROM

    src = tmp_path / "src"
    files = {f"d{i % 7}/f{i:04d}.bin": os.urandom(40 + i % 50) for i in range(SYNCFS_FROM * 2)}
    for relpath, data in files.items():
        (src / relpath).parent.mkdir(parents=True, exist_ok=True)
        (src / relpath).write_bytes(data)
    mark_complete(src, 1)
    store = CheckpointStore(f"file://{tmp_path}/store")
    store.publish(src)
    out = tmp_path / "out"
    assert store.restore(out).step == 1
    assert {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*.bin")} == files
