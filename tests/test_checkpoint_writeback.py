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
