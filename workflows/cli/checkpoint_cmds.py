"""``resched checkpoint publish|restore|list|verify``: thin commands over the store."""

from __future__ import annotations

import errno
import sys
import time
from pathlib import Path

import click

from wrapper.checkpoint.errors import CheckpointError
from wrapper.checkpoint.results import RestoreResult
from wrapper.checkpoint.store import CheckpointStore
from wrapper.redact import redact
from wrapper.safe_output import write_control


def _echo(text: str, **kwargs: object) -> None:
    """Every line of these commands names a store URL: never print its credentials."""
    click.echo(redact(text), **kwargs)  # type: ignore[arg-type]


_TARGET_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT,
                  errno.ENOTDIR)


class _Progress:
    """Bytes moved, redrawn on stderr at most 5 times a second, only on a terminal."""

    def __init__(self, label: str, total: int | None = None) -> None:
        self.enabled = sys.stderr.isatty()
        self.label, self.total, self.done = label, total, 0
        self.started = self._drawn = time.monotonic()

    def __call__(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and now - self._drawn >= 0.2:
            self._drawn = now
            rate = self.done / max(now - self.started, 1e-9)
            of = f" / {_size(self.total)}" if self.total else ""
            write_control(sys.stderr, "\r")
            _echo(f"{self.label}: {_size(self.done)}{of} ({_size(rate)}/s)  ", err=True, nl=False)

    def close(self) -> None:
        if self.enabled and self._drawn != self.started:
            write_control(sys.stderr, "\r\033[K")


def _size(count: float | None) -> str:
    value = float(count or 0)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if stamp else "-"


@click.group("checkpoint")
def checkpoint() -> None:
    """Publish, restore, list and verify checkpoints in a store (a path or fsspec URL)."""


@checkpoint.command("publish")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.argument("url")
@click.option("--step", type=click.IntRange(min=0), help="Step to record (default: the marker's).")
@click.option("--retention", type=click.IntRange(min=1), default=3, show_default=True,
              help="Complete checkpoints to keep.")
@click.option("--osmo-layout", is_flag=True, help="Publish to URL/<basename of DIRECTORY>.")
def publish_cmd(directory: Path, url: str, step: int | None, retention: int,
                osmo_layout: bool) -> None:
    """Publish DIRECTORY as the new latest checkpoint of the store at URL."""
    store = CheckpointStore(url, retention=retention, osmo_layout=osmo_layout)
    progress = _Progress("publish")
    try:
        result = store.publish(directory, step, progress=progress)
    finally:
        progress.close()
    if not result.changed:
        _echo(f"unchanged: {result.url} already holds step {result.step} "
                   f"({result.checkpoint_id}); nothing published")
        return
    removed = f"; removed {result.deleted_manifests} old/torn checkpoint(s)" if (
        result.deleted_manifests) else ""
    _echo(
        f"published step {result.step} as {result.checkpoint_id} to {result.url}: "
        f"{result.files} files, {_size(result.size)} (sent {result.uploaded_files} files, "
        f"{_size(result.uploaded_bytes)}) in {result.seconds:.1f} s{removed}"
    )


@checkpoint.command("restore")
@click.argument("url")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True,
              help="Restore into a non-empty directory (the checkpoint's files are "
              "overwritten, other files are kept).")
@click.option("--osmo-layout", is_flag=True, help="Restore from URL/<basename of DIRECTORY>.")
def restore_cmd(url: str, directory: Path, force: bool, osmo_layout: bool) -> None:
    """Restore the newest complete, verified checkpoint of URL into DIRECTORY."""
    progress = _Progress("restore")
    try:
        result = CheckpointStore(url, osmo_layout=osmo_layout).restore(
            directory, allow_nonempty=force, progress=progress)
    except OSError as error:  # the target, not the store: a read-only or full file system
        if error.errno not in _TARGET_ERRNOS:
            raise
        raise CheckpointError(f"cannot restore into {directory}: {error.strerror or error}",
                              fix="choose a writable target directory") from None
    finally:
        progress.close()
    if result is None:
        _echo(f"store {url} holds no checkpoint; nothing restored", err=True)
        return
    _report_restore(result)


def _report_restore(result: RestoreResult) -> None:
    if result.fell_back:
        _echo(f"resched: warning: fell back past {len(result.fell_back_from)} newer "
                   f"checkpoint(s) that failed verification: {result.reason}", err=True)
    _echo(f"restored step {result.step} ({result.checkpoint_id}) from {result.url} into "
               f"{result.local_dir}: {result.files} files, {_size(result.size)}, verified")


@checkpoint.command("list")
@click.argument("url")
def list_cmd(url: str) -> None:
    """List the checkpoints of URL: step, time, size, complete or torn."""
    infos = CheckpointStore(url).list()
    if not infos:
        _echo(f"store {url} holds no checkpoint")
        return
    _echo(f"{'STEP':>10}  {'TIME':19}  {'SIZE':>10}  {'FILES':>5}  {'STATE':9}  ID")
    for info in infos:
        state = info.state + ("*" if info.latest else "")
        step = "-" if info.step is None else str(info.step)
        _echo(f"{step:>10}  {_when(info.time):19}  {_size(info.size):>10}  "
                   f"{info.files:>5}  {state:9}  {info.checkpoint_id}")
        for torn in info.torn_sets:  # kept in the store, never restored (issue 19)
            _echo(f"{'':>10}  torn save kept aside: {torn}/")
    _echo("(* = latest)")


@checkpoint.command("verify")
@click.argument("url")
def verify_cmd(url: str) -> None:
    """Re-hash every file of every complete checkpoint of URL; exit 1 on any damage."""
    progress = _Progress("verify")
    try:
        result = CheckpointStore(url).verify(progress=progress)
    finally:
        progress.close()
    if not result.checks:
        raise CheckpointError(f"store {url} holds no complete checkpoint",
                              fix="publish one first, or check the URL")
    for check in result.checks:
        verdict = "ok" if check.ok else "DAMAGED: " + "; ".join(check.problems)
        _echo(f"step {check.step} ({check.checkpoint_id}): {verdict}")
    if result.orphan_blobs:
        _echo(f"{result.orphan_blobs} unreferenced blob(s) (removed by the next publish)")
    if not result.all_ok:
        bad = sum(not check.ok for check in result.checks)
        raise CheckpointError(f"{bad} of {len(result.checks)} checkpoint(s) in {url} are "
                              "damaged", fix="restore falls back to the newest intact one; "
                              "publish again to get a fresh latest")


COMMANDS: list[click.Command] = [checkpoint]
