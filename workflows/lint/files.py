"""Rules on things outside the spec: urls the target can reach, local files to upload."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from workflows.lint.core import Finding, LintContext
from workflows.spec import OSMO_URL_SCHEMES, url_scheme

_OSMO_SCHEMES = ", ".join(f"{s}://" for s in OSMO_URL_SCHEMES)


def _urls(ctx: LintContext) -> Iterator[tuple[str, str, str]]:
    """(path, kind, url) of every url in inputs, outputs and checkpoints."""
    for site in ctx.sites:
        task = site.task
        for i, item in enumerate(task.inputs):
            if item.url is not None:
                yield f"{site.path}.inputs[{i}].url", "input", item.url
        for i, output in enumerate(task.outputs):
            yield f"{site.path}.outputs[{i}].url", "output", output.url
        for i, checkpoint in enumerate(task.checkpoint):
            yield f"{site.path}.checkpoint[{i}].url", "checkpoint", checkpoint.url


def rs002_local_url_on_osmo(ctx: LintContext) -> Iterator[Finding]:
    """file:// and plain paths work for the local and Slurm backends, never on OSMO."""
    if ctx.options.target != "osmo":
        return
    for path, kind, url in _urls(ctx):
        scheme = url_scheme(url)
        if scheme not in (None, "file"):
            continue
        form = "a file:// url" if scheme else "a plain path"
        yield ctx.finding(
            "RS002", "error", path,
            f"{kind} url {url} is {form}, which OSMO cannot reach (its pods see object "
            "storage only)",
            f"use an {_OSMO_SCHEMES} url (e.g. --set upload_location=s3://BUCKET/RUN), "
            "or run it with --target local / slurm",
        )


def rs015_localpath_missing(ctx: LintContext) -> Iterator[Finding]:
    """OSMO's CLI replaces localpath: with the file's contents before submitting."""
    for site in ctx.sites:
        for i, file in enumerate(site.task.files):
            if file.localpath is None:
                continue
            resolved = (ctx.base_dir / Path(file.localpath).expanduser()).resolve()
            if resolved.is_file():
                continue
            what = "is a directory" if resolved.is_dir() else "does not exist"
            yield ctx.finding(
                "RS015", "error", f"{site.path}.files[{i}].localpath",
                f"localpath {file.localpath} of task {site.task.name} {what} ({resolved})",
                f"point localpath at a file; relative paths start from the spec's folder "
                f"{ctx.base_dir}",
            )


RULES = (rs002_local_url_on_osmo, rs015_localpath_missing)
