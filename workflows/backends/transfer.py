"""Moving task data the way OSMO's runtime does, shared by the local executor and the Slurm
in-job helper: outputs to their urls, a producer's outputs into a consumer's input folder,
and an input's ``regex:``. The rules (what matches) come from :mod:`workflows.osmo_runtime`;
this module only touches files.

Light on purpose (standard library; fsspec imported when an upload runs): the Slurm
helper imports it at every job start. Links are copied as links and never followed, and
only files this staging itself just wrote are ever removed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from workflows.osmo_runtime import InputKind, InputRule


def _files(root: Path) -> list[Path]:
    """Regular files under ``root`` (links to directories are not entered)."""
    found = []
    for folder, _dirs, names in os.walk(root, followlinks=False):
        found += [Path(folder) / n for n in names]
    return sorted(p for p in found if p.is_file() and not p.is_symlink())


def keep_matching(root: Path, rule: InputRule) -> int:
    """``regex:`` on a freshly staged folder: drop what it does not match; return the count."""
    if rule.regex is None:
        return 0
    dropped = 0
    for path in _files(root):
        if not rule.keeps(path.relative_to(root).as_posix()):
            path.unlink()
            dropped += 1
    return dropped


def copy_outputs(source: Path, dest: Path) -> int:
    """A ``task:`` input: the producer's output folder into ``dest`` (links stay links)."""
    dest.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, dest, dirs_exist_ok=True, symlinks=True)
    return len(_files(dest))


def upload_tree(directory: Path, url: str, regex: str | None = None) -> list[str]:
    """An ``outputs:`` entry: every file of ``directory`` that ``regex`` matches (by its
    relative path, as for inputs) to ``url``; return the targets written."""
    import fsspec  # type: ignore[import-untyped]

    rule = InputRule(0, InputKind.URL, url, regex)
    files = [p for p in _files(directory) if rule.keeps(p.relative_to(directory).as_posix())] \
        if directory.is_dir() else []
    if not files:
        return []
    fs, root = fsspec.core.url_to_fs(url)
    written = []
    for path in files:
        target = f"{root.rstrip('/')}/{path.relative_to(directory).as_posix()}"
        fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        fs.put_file(str(path), target)
        written.append(target)
    return written
