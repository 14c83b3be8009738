"""Where resched keeps what it can always rebuild: ``$RESCHED_CACHE_DIR``, else
``$XDG_CACHE_HOME/resched``, else ``~/.cache/resched``. Losing any of it costs time, never
a result: the checkpoint hash cache, the directory locks' second copy, the classifier's
compiled pattern database."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    explicit = os.environ.get("RESCHED_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "resched"
