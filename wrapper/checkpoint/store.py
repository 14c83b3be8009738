"""CheckpointStore: the public face of the checkpoint store (see docs/checkpoint.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wrapper.checkpoint.errors import CheckpointError, SnapshotUnstableError
from wrapper.checkpoint.hashing import HashCache
from wrapper.checkpoint.layout import read_pointer
from wrapper.checkpoint.publish import publish_snapshot
from wrapper.checkpoint.restore import list_checkpoints, restore_latest
from wrapper.checkpoint.restore_swap import heal
from wrapper.checkpoint.results import CheckpointInfo, PublishResult, RestoreResult, VerifyResult
from wrapper.checkpoint.retry import RetryPolicy, StoreOperationError
from wrapper.checkpoint.snapshot import prepare_snapshot
from wrapper.checkpoint.storefs import StoreFS
from wrapper.checkpoint.verify import verify_store
from wrapper.redact import register_url_secrets

Progress = Callable[[int], None]


class CheckpointStore:
    """Atomic, incremental, verified checkpoints under one fsspec URL.

    ``osmo_layout``: a directory lands under its base name, as OSMO's runtime does
    (publishing /tmp/models to X uses the store X/models). ``list``/``verify`` then look
    at the store of the last directory published or restored, or at ``url`` itself.
    """

    def __init__(self, url: str, *, retention: int = 3, osmo_layout: bool = False,
                 storage_options: dict[str, Any] | None = None,
                 retry: RetryPolicy | None = None, hash_cache: bool = True,
                 wall_clock: Callable[[], float] = time.time) -> None:
        if isinstance(retention, bool) or not isinstance(retention, int) or retention < 1:
            raise CheckpointError(f"retention must be an integer >= 1, got {retention!r}",
                                  fix="keep at least the latest checkpoint (--retention 1)")
        if not url:
            raise CheckpointError("checkpoint URL is empty", fix="pass a path or fsspec URL")
        register_url_secrets(url, storage_options)
        self.url = url
        self.retention = retention
        self.osmo_layout = osmo_layout
        self._storage_options = storage_options
        self._retry = retry or RetryPolicy()
        self._hash_cache = hash_cache
        self._wall_clock = wall_clock
        self._last_root: str | None = None

    def root_url(self, local_dir: Path | None = None) -> str:
        if self.osmo_layout and local_dir is not None:
            name = Path(os.path.abspath(local_dir)).name
            return f"{self.url.rstrip('/')}/{name}"
        return self._last_root or self.url

    def _open(self, local_dir: Path | None) -> StoreFS:
        root = self.root_url(local_dir)
        if local_dir is not None:
            self._last_root = root
        return StoreFS(root, retry=self._retry, storage_options=self._storage_options)

    def publish(self, local_dir: Path, step: int | None = None, *, settle_s: float = 0.0,
                progress: Progress | None = None, final: bool = False,
                regex: str | None = None, layouts: bool = False) -> PublishResult:
        """Publish ``local_dir`` as a new checkpoint (step: given, else the marker's or
        the framework layout's). ``final``: the training has ended, upload what is there
        (see snapshot.prepare_snapshot); ``regex``: OSMO's checkpoint ``regex:``;
        ``layouts``: judge completeness by the framework's own files too (the uploads
        that run beside a training: OSMO's timer, the wrapper's syncer)."""
        local_dir = Path(local_dir)
        prepared = prepare_snapshot(local_dir, final=final, settle_s=settle_s, regex=regex,
                                    layouts=layouts)
        snapshot = prepared.snapshot
        if step is None:
            step = prepared.step
        store = self._open(local_dir)
        if not prepared.whole and self._holds_checkpoint(store):
            # A torn final state never replaces a complete checkpoint the store holds.
            raise SnapshotUnstableError(f"{prepared.reason}; the store keeps its latest "
                                        "complete checkpoint")
        cache = HashCache(local_dir, enabled=self._hash_cache)
        try:
            return publish_snapshot(store, snapshot, step=step, retention=self.retention,
                                    cache=cache, progress=progress, wall_clock=self._wall_clock)
        except StoreOperationError as error:
            raise CheckpointError(
                f"publish of {local_dir} to {_where(store)} failed: {_one_line(error)}",
                fix="check that the store is reachable and writable; the previous "
                "checkpoint is still the latest",
            ) from None
        except OSError as error:
            raise CheckpointError(f"publish of {local_dir} failed: {error}") from None

    def _holds_checkpoint(self, store: StoreFS) -> bool:
        try:
            pointer = read_pointer(store)
        except (CheckpointError, StoreOperationError):
            return True  # cannot tell: be safe, keep what is there
        return pointer is not None and bool(pointer.checkpoints)

    def restore(self, local_dir: Path, *, allow_nonempty: bool = False,
                progress: Progress | None = None) -> RestoreResult | None:
        """Restore the newest complete checkpoint that verifies; None if the store is empty."""
        local_dir = Path(local_dir)
        if local_dir.exists() and not local_dir.is_dir():
            raise CheckpointError(f"{local_dir} exists and is not a directory",
                                  fix="restore into a directory")
        heal(local_dir)  # an interrupted restore into it is finished or undone first
        if not allow_nonempty and local_dir.is_dir() and any(local_dir.iterdir()):
            raise CheckpointError(
                f"{local_dir} is not empty; restoring would overwrite files in it",
                fix="restore into an empty directory, or pass --force (allow_nonempty=True) "
                "to overwrite the checkpoint's files and keep the others",
            )
        store = self._open(local_dir)
        try:
            return restore_latest(store, local_dir, progress=progress)
        except StoreOperationError as error:
            raise CheckpointError(f"restore from {_where(store)} failed: {_one_line(error)}",
                                  fix="check that the store is reachable") from None
        finally:
            store.close_dirs()

    def list(self) -> list[CheckpointInfo]:
        return self._guard(lambda store: list_checkpoints(store))

    def verify(self, *, progress: Progress | None = None) -> VerifyResult:
        return self._guard(lambda store: verify_store(store, progress=progress))

    def _guard(self, operation: Callable[[StoreFS], Any]) -> Any:
        store = self._open(None)
        try:
            return operation(store)
        except StoreOperationError as error:
            raise CheckpointError(f"cannot read store {_where(store)}: {_one_line(error)}",
                                  fix="check the URL and that the store is reachable") from None
        finally:
            store.close_dirs()


def _where(store: StoreFS) -> str:
    """The store's URL and, for a remote one, the server it talks to (redacted later)."""
    return f"{store.url} (endpoint {store.endpoint})" if store.endpoint else store.url


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
