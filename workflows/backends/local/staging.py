"""Inputs downloaded into a new pod, outputs uploaded when a task ends (section 3).

Urls go through the checkpoint package's ``stage_url`` (a resched store: the newest
verified checkpoint; anything else: a plain copy; missing: empty, as OSMO downloads
nothing). ``task:`` inputs copy the producing task's output folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from workflows.backends.local.plan import PlannedInput, PlannedOutput
from workflows.backends.transfer import copy_outputs, keep_matching, upload_tree
from workflows.errors import BackendError
from workflows.osmo_runtime import InputKind, normalize_name


def stage_input(item: PlannedInput, task_dirs: dict[str, Path]) -> int | None:
    """(Re)create ``item.dest`` from its source; return the checkpoint step found, if any."""
    from wrapper.checkpoint import stage_url
    from wrapper.checkpoint.snapshot import checkpoint_step

    if item.dest.exists():
        shutil.rmtree(item.dest)
    item.dest.mkdir(parents=True)
    if item.kind is InputKind.TASK:
        by_name = {normalize_name(name): path for name, path in task_dirs.items()}
        copy_outputs(by_name[normalize_name(item.source)] / "output", item.dest)
    else:
        stage_url(item.source, item.dest)
    keep_matching(item.dest, item.rule)
    return checkpoint_step(item.dest)  # the marker's, else the framework layout's


def upload_outputs(output_dir: Path, outputs: tuple[PlannedOutput, ...]) -> list[str]:
    """Copy the task's output folder to each output url; return what was written."""
    written = []
    for output in outputs:
        try:
            written += upload_tree(output_dir, output.url, output.regex)
        except (OSError, ValueError) as error:
            raise BackendError(f"uploading outputs to {output.url} failed: {error}",
                               fix="check the output url and its credentials") from None
    return written
