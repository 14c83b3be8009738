"""Put the HTML file in place: atomically, and never over a file resched did not write."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from workflows.errors import UsageError
from workflows.report.html import GENERATOR

_MARK = f'<meta name="generator" content="{GENERATOR}">'.encode()


def _ours(path: Path) -> bool:
    """A regular file that an earlier ``resched report`` wrote (its generator tag up front)."""
    try:
        with path.open("rb") as handle:
            return _MARK in handle.read(4096)
    except OSError:
        return False


_FIX = "choose another --html path, or move that file away yourself"


def check_target(path: Path) -> None:
    """Refuse a link or a file resched did not write (checked before a run, and at writing)."""
    if path.is_symlink():
        raise UsageError("is a symbolic link; resched does not write through links", where=str(path), fix=_FIX)
    if path.exists() and (not path.is_file() or not _ours(path)):
        raise UsageError("exists and was not written by `resched report`; it is left as it is",
                         where=str(path), fix=_FIX)


def write_html(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (temp file + rename); refuse links and foreign files."""
    check_target(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)  # our own temp file, never the target
            raise
    except OSError as error:
        raise UsageError(f"cannot write the report: {error.strerror or error}", where=str(path),
                         fix=_FIX) from None
    return path
