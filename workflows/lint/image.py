"""RS019: a task runs `resched wrap` in an image that does not say it has resched.

OSMO runs each task in its ``image``; the shipped templates' default is the stock NGC
PyTorch image, which has no ``resched`` (the task would end with "command not found",
exit 127, before any training). An image says it has resched when its reference names
it (the image built from ``docker/Dockerfile``, tagged ``.../resched-pytorch:...``, see
docs/your-training.md), or when the task installs it itself (a ``pip install`` naming
resched before the call). Only for OSMO: locally and on Slurm the task runs with this
machine's resched.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from workflows.lint.core import Finding, LintContext
from workflows.lint.wrap_scan import task_texts, task_wrap_calls

_IMAGE_SAYS = re.compile(r"resched", re.IGNORECASE)
# `pip install ... resched...`, `python -m pip install`, `uv pip install`, a wheel or a
# git url whose name holds resched
_INSTALLS = re.compile(r"\bpip3?\s+install\b[^\n;&|]*resched", re.IGNORECASE)
_MAX_FILE = 1 << 20


def rs019_wrap_without_resched_in_image(ctx: LintContext) -> Iterator[Finding]:
    """`resched wrap` needs resched inside the task's image."""
    if ctx.options.target != "osmo":
        return
    for site in ctx.sites:
        calls = task_wrap_calls(ctx, site)
        if not calls:
            continue
        image = site.task.image
        if not image or _IMAGE_SAYS.search(image):
            continue  # no image named: nothing to judge it by
        texts = task_texts(site, ctx.base_dir, max_bytes=_MAX_FILE)
        if any(_INSTALLS.search(text) for _where, text in texts):
            continue
        yield ctx.finding(
            "RS019", "warning", calls[0].where,
            f"task {site.task.name} runs resched wrap in image {image}, which does not say it has "
            "resched: the task would fail with 'resched: command not found' before training",
            "build the image from docker/Dockerfile (FROM the NGC PyTorch image) and pass it "
            "with --set image=REGISTRY/resched-pytorch:TAG, or pip install resched in the "
            "task before the call (docs/your-training.md)",
        )


RULES = (rs019_wrap_without_resched_in_image,)
