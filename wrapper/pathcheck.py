"""Refuse, up front and in one line, a path of the wrong kind for what it is used for.

A file where a directory goes, a directory or FIFO where a file is written (opening a FIFO
for writing blocks forever), or a file among the parents of a path to be created: each
used to surface later as an OSError traceback (exit 70) in the middle of a run.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Literal

from wrapper.errors import ReschedError

Kind = Literal["dir", "file"]


class PathKindError(ReschedError):
    """A path that can never work for its option."""


def check_path_kind(path: Path, want: Kind, flag: str) -> None:
    """``path`` is (or can be created as) a directory / regular file; else PathKindError."""
    if str(path) == "":
        raise PathKindError("the path is empty", where=flag, fix="give a path")
    try:
        mode: int | None = Path(path).stat().st_mode  # a link to the right kind is fine
    except (FileNotFoundError, NotADirectoryError):
        mode = None  # missing (created later), or a file among the parents (found below)
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise PathKindError(f"{path!r} cannot be used: {reason}", where=flag,
                            fix="choose a path below a directory you can write") from None
    if mode is not None:
        if want == "dir" and not stat.S_ISDIR(mode):
            raise PathKindError(f"{path} is not a directory", where=flag,
                                fix="give a directory (it is created if missing)")
        if want == "file" and not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise PathKindError(f"{path} is {kind}", where=flag,
                                fix="give a file path (it is created if missing)")
        return
    for parent in Path(path).absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise PathKindError(f"{path} cannot be created: {parent} is not a directory",
                                    where=flag, fix="choose a path below a directory")
            return


__all__ = ["PathKindError", "check_path_kind"]
