"""Links inside a checkpoint: the one kind that is taken (as a copy of its target).

Lightning's ``save_last="link"`` makes ``last.ckpt`` a relative link to the newest step
file beside it. The snapshot publishes such a link as a copy of its target and the
marker records the target's stat, so both judge the same file."""

from __future__ import annotations

import os
import stat


def sibling_target(link: str, top: str) -> tuple[str, os.stat_result] | None:
    """The regular file a link inside the checkpoint points to, when that file is inside
    the checkpoint too (Lightning's ``save_last="link"`` makes ``last.ckpt`` such a link
    to the newest step file); None for anything else, which is refused.

    The link goes up as a copy of that file (the same bytes, so the store keeps them
    once) and comes back as a regular file: ``fit(ckpt_path="last")`` loads it, and
    Lightning replaces it by a new link at its next save. Nothing outside the directory
    is ever read through a link: every link on the way is resolved first."""
    real = os.path.realpath(link)
    root = os.path.realpath(top)
    if os.path.commonpath([real, root]) != root or real == root:
        return None
    try:
        st = os.lstat(real)
    except OSError:
        return None
    return (real, st) if stat.S_ISREG(st.st_mode) else None
