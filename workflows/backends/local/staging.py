"""Inputs downloaded into a new pod, outputs uploaded when a task ends (section 3).

Urls go through the checkpoint package's ``stage_url`` (a resched store: the newest
verified checkpoint; anything else: a plain copy; missing: empty, as OSMO downloads
nothing). ``task:`` inputs copy the producing task's output folder.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import fsspec  # type: ignore[import-untyped]

from workflows.backends.local.plan import PlannedInput, PlannedOutput
from workflows.errors import BackendError
from workflows.osmo_runtime import InputKind, InputRule, normalize_name


def stage_input(item: PlannedInput, task_dirs: dict[str, Path]) -> int | None:
    """(Re)create ``item.dest`` from its source; return the checkpoint step found, if any."""
    from wrapper.checkpoint import stage_url
    from wrapper.checkpoint.snapshot import checkpoint_step

    if item.dest.exists():
        shutil.rmtree(item.dest)
    item.dest.mkdir(parents=True)
    if item.kind is InputKind.TASK:
        by_name = {normalize_name(name): path for name, path in task_dirs.items()}
        source = by_name[normalize_name(item.source)] / "output"
        if source.is_dir():
            shutil.copytree(source, item.dest, dirs_exist_ok=True)
    else:
        stage_url(item.source, item.dest)
    if item.regex:
        _keep_matching(item.dest, item.rule)
    return checkpoint_step(item.dest)  # the marker's, else the framework layout's


def _keep_matching(root: Path, rule: InputRule) -> None:
    # Only files the staging itself just wrote into the fresh input folder are removed.
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file() and not rule.keeps(path.relative_to(root).as_posix()):
            path.unlink()


def upload_outputs(output_dir: Path, outputs: tuple[PlannedOutput, ...]) -> list[str]:
    """Copy the task's output folder to each output url; return what was written."""
    written = []
    files = [p for p in sorted(output_dir.rglob("*")) if p.is_file()] if output_dir.is_dir() else []
    for output in outputs:
        pattern = re.compile(output.regex) if output.regex else None
        try:
            fs, root = fsspec.core.url_to_fs(output.url)
            for path in files:
                relative = path.relative_to(output_dir).as_posix()
                if pattern is not None and not pattern.search(relative):
                    continue
                target = f"{root.rstrip('/')}/{relative}"
                fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                fs.put_file(str(path), target)
                written.append(target)
        except (OSError, ValueError) as error:
            raise BackendError(f"uploading outputs to {output.url} failed: {error}",
                               fix="check the output url and its credentials") from None
    return written
