"""Read a user's input file (spec, values, rules) as text, safely.

``Path.read_text`` on ``/dev/zero`` reads until memory runs out, and on a FIFO with no
writer it blocks forever. Inputs are therefore opened without blocking, must be regular
files (after following links: the user named them, we only read them), and are read up
to a size limit. The text is decoded as UTF-8 with universal newlines, exactly as
``read_text`` did before, so rendering stays byte for byte the same.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from wrapper.errors import ReschedError

# Far above any real workflow, values or rules file, far below what hurts a 2-core CI box.
MAX_INPUT_BYTES = 8 * 1024 * 1024


class InputFileError(ReschedError):
    """An input file that cannot be read as text (missing, wrong kind, too big, not UTF-8)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_input_bytes(path: Path, *, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of regular file ``path``; one clear :class:`InputFileError` otherwise."""
    where = str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; regular files ignore it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as error:
        raise InputFileError(f"cannot read {what}: {error.strerror or error}", where=where,
                             fix="pass an existing, readable file") from None
    except ValueError as error:  # a NUL byte in the name
        raise InputFileError(f"cannot read {what}: {error}", where=repr(where)) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # before fdopen, which refuses a directory with a traceback
        os.close(fd)
        raise InputFileError(f"{what} is {_kind(mode)}, not a regular file", where=where or "''",
                             fix="pass a regular file")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as error:
            raise InputFileError(f"cannot read {what}: {error.strerror or error}",
                                 where=where) from None
    if len(data) > limit:
        raise InputFileError(f"{what} is larger than {limit // (1024 * 1024)} MiB",
                             where=where, fix="pass a smaller file")
    return data


def read_input_text(path: Path, *, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """UTF-8 text of ``path`` with universal newlines (as ``Path.read_text``)."""
    data = read_input_bytes(path, what=what, limit=limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputFileError(
            f"{what} is not UTF-8 text ({error.reason} at byte {error.start})",
            where=str(path), fix="save it as UTF-8 text",
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


__all__ = ["MAX_INPUT_BYTES", "InputFileError", "read_input_bytes", "read_input_text"]
