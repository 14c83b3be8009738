"""Rules on checkpoint: entries: does the checkpoint come back, who writes it, how often."""

from __future__ import annotations

from collections.abc import Iterator

from workflows.lint.core import Finding, LintContext, TaskSite
from workflows.lint.wrap_scan import task_wrap_calls
from workflows.spec import Checkpoint, Task

MIN_FREQUENCY_S = 30.0


def _same_or_parent(input_url: str, upload_url: str) -> bool:
    base = input_url.rstrip("/")
    return upload_url == base or upload_url.startswith(base + "/")


def has_checkpoint_input(task: Task, checkpoint: Checkpoint) -> bool:
    """An input that downloads what OSMO uploads (``url/<basename(path)>``) or a parent of it."""
    upload = checkpoint.upload_url
    return any(i.url is not None and _same_or_parent(i.url, upload) for i in task.inputs)


def _seconds(value: float) -> str:
    return f"{value:g} s"


def rs001_checkpoint_not_an_input(ctx: LintContext) -> Iterator[Finding]:
    """Inputs are the ONLY way a checkpoint comes back after a reschedule (OSMO section 3)."""
    for writer in ctx.sites:
        for checkpoint in writer.task.checkpoint:
            for site in ctx.sites_in(writer.group):
                if has_checkpoint_input(site.task, checkpoint):
                    continue
                written_by = "" if site is writer else f" (task {writer.task.name} writes it)"
                yield ctx.finding(
                    "RS001", "warning", site.path,
                    f"checkpoint url {checkpoint.url} is not an input of task {site.task.name}"
                    f"{written_by}; after a reschedule it would start from step 0",
                    f"add `- url: {checkpoint.upload_url}` under the inputs of task "
                    f"{site.task.name} (OSMO uploads {checkpoint.path} to "
                    f"{checkpoint.upload_url})",
                )


def rs003_checkpoint_only_on_non_lead(ctx: LintContext) -> Iterator[Finding]:
    """The lead's fate decides the group; the tutorial checkpoints on the lead (rank 0)."""
    for group in {id(s.group): s.group for s in ctx.sites}.values():
        sites = ctx.sites_in(group)
        writers = [s for s in sites if s.task.checkpoint]
        if len(sites) < 2 or not writers or any(s.task.lead for s in writers):
            continue
        names = ", ".join(s.task.name for s in writers)
        yield ctx.finding(
            "RS003", "warning", f"{writers[0].path}.checkpoint",
            f"only non-lead task(s) {names} of group {group.name} write a checkpoint; when the "
            f"lead {group.lead_task.name} reschedules, the others restart in place without "
            "downloading inputs again, and the lead (usually global rank 0) has no checkpoint",
            f"move the checkpoint to the lead task {group.lead_task.name}, or make the task "
            "that writes it the lead",
        )


def rs012_checkpoint_frequency(ctx: LintContext) -> Iterator[Finding]:
    """OSMO re-uploads every file on every tick (not incremental)."""
    write_s = ctx.options.checkpoint_write_s
    for site in ctx.sites:
        for index, checkpoint in enumerate(site.task.checkpoint):
            every = checkpoint.frequency_s
            path = f"{site.path}.checkpoint[{index}].frequency"
            if write_s is not None and every <= write_s:
                yield ctx.finding(
                    "RS012", "warning", path,
                    f"checkpoint {checkpoint.path} uploads every {_seconds(every)}, no longer than "
                    f"the {_seconds(write_s)} a checkpoint takes to write: uploads can catch a "
                    "half-written checkpoint and run back to back",
                    f"set frequency to at least {_seconds(max(MIN_FREQUENCY_S, 2 * write_s))}",
                )
            elif every < MIN_FREQUENCY_S:
                yield ctx.finding(
                    "RS012", "warning", path,
                    f"checkpoint {checkpoint.path} uploads every {_seconds(every)}: OSMO uploads "
                    "every matching file again on each tick (not incremental), which at this rate "
                    "competes with training for bandwidth",
                    f"set frequency to {MIN_FREQUENCY_S:g}s or more (e.g. 5m)",
                )


def _wrap_owns_store(site: TaskSite, ctx: LintContext) -> bool:
    return any(call.checkpoint_url for call in task_wrap_calls(ctx, site))


def rs016_reschedule_without_checkpoint(ctx: LintContext) -> Iterator[Finding]:
    """A reschedule with nothing to resume from restarts training from step 0."""
    for site in ctx.sites:
        if "RESCHEDULE" not in site.task.exitActions:
            continue
        group_sites = ctx.sites_in(site.group)
        if any(s.task.checkpoint for s in group_sites):
            continue
        if any(_wrap_owns_store(s, ctx) for s in group_sites):
            continue
        yield ctx.finding(
            "RS016", "warning", f"{site.path}.exitActions.RESCHEDULE",
            f"task {site.task.name} can be rescheduled but nothing in group {site.group.name} "
            "writes a checkpoint, so a rescheduled task starts from step 0",
            f"add `checkpoint: [{{path: /tmp/models, url: s3://BUCKET/RUN, frequency: 5m}}]` to "
            f"the lead task {site.group.lead_task.name} and the url's /models under inputs "
            "(or let `resched wrap --checkpoint-url` own the store); ignore this if the "
            "training saves to object storage itself",
        )


def _covers(path: str, directory: str) -> bool:
    base = path.rstrip("/") or "/"
    target = directory.rstrip("/") or "/"
    return target == base or target.startswith(base.rstrip("/") + "/")


def rs018_checkpoint_path_not_the_wrap_dir(ctx: LintContext) -> Iterator[Finding]:
    """OSMO uploads checkpoint.path; the training writes into wrap's --checkpoint-dir."""
    for site in ctx.sites:
        if not site.task.checkpoint:
            continue
        paths = [c.path for c in site.task.checkpoint]
        for call in task_wrap_calls(ctx, site):
            directory = call.checkpoint_dir
            if directory is None or any(_covers(p, directory) for p in paths):
                continue
            yield ctx.finding(
                "RS018", "warning", f"{site.path}.checkpoint[0].path",
                f"task {site.task.name} uploads {', '.join(paths)}, but resched wrap's "
                f"--checkpoint-dir is {directory}: the checkpoints the training writes never "
                "leave the node, so a reschedule starts from step 0",
                f"set the checkpoint path to {directory} (or pass --checkpoint-dir "
                f"{paths[0]} to resched wrap)",
            )


RULES = (
    rs001_checkpoint_not_an_input,
    rs003_checkpoint_only_on_non_lead,
    rs012_checkpoint_frequency,
    rs016_reschedule_without_checkpoint,
    rs018_checkpoint_path_not_the_wrap_dir,
)
