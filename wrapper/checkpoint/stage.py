"""Staging a URL into a task's directory, and OSMO's own plain checkpoint layout.

``stage_url`` is what the local executor and the Slurm backend use for ``inputs:``:
a resched store (it has a ``latest`` pointer) is restored, verified, newest complete
first; any other tree (plain files, OSMO's layout) is copied as is; a missing or empty
URL gives an empty destination (OSMO: nothing to download).

``upload_plain`` emulates OSMO's runtime upload exactly: every file under ``path`` is
copied to ``url/<basename(path)>/<relative path>``, existing keys are overwritten,
nothing is deleted, no manifest. It is not atomic; prefer a store where that matters.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

from wrapper.checkpoint.errors import CheckpointError
from wrapper.checkpoint.layout import MANIFESTS, POINTER_KEY, blob_sha
from wrapper.checkpoint.manifest import safe_relpath
from wrapper.checkpoint.ownership import IDENTITY_KEY
from wrapper.checkpoint.restore import _safe_destination
from wrapper.checkpoint.results import StageResult
from wrapper.checkpoint.retry import RetryPolicy, StoreOperationError
from wrapper.checkpoint.snapshot import TEMP_TAG, take_snapshot
from wrapper.checkpoint.store import CheckpointStore
from wrapper.checkpoint.storefs import StoreFS


def stage_url(url: str, dest: Path, *, allow_nonempty: bool = True,
              storage_options: dict[str, Any] | None = None,
              retry: RetryPolicy | None = None) -> StageResult:
    dest = Path(dest)
    store = StoreFS(url, retry=retry or RetryPolicy(), storage_options=storage_options)
    try:
        if store.exists(POINTER_KEY):
            restored = CheckpointStore(url, storage_options=storage_options,
                                       retry=retry).restore(dest, allow_nonempty=allow_nonempty)
            dest.mkdir(parents=True, exist_ok=True)
            if restored is None:
                return StageResult(url, dest, "empty", 0)
            return StageResult(url, dest, "store", restored.files, restored.step, restored)
        copied = _copy_tree(store, dest)
    except StoreOperationError as error:
        raise CheckpointError(f"cannot stage {url}: {error}",
                              fix="check the URL and that the store is reachable") from None
    return StageResult(url, dest, "tree" if copied else "empty", copied)


def _copy_tree(store: StoreFS, dest: Path) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    if store.retry.call(lambda: store.fs.isfile(store.root), what=f"stat {store.url}"):
        name = store.root.rstrip("/").rsplit("/", 1)[-1]
        _fetch_plain(store, store.root, _safe_destination(dest, safe_relpath(name, where=store.url)))
        return 1
    found = store.list_files("")
    if any(blob_sha(key) or key.startswith(MANIFESTS) or key == IDENTITY_KEY for key in found):
        return 0  # a resched store whose first publish never committed: nothing complete
    for relkey in sorted(found):
        relpath = safe_relpath(relkey, where=store.key(relkey))
        _fetch_plain(store, store.key(relkey), _safe_destination(dest, relpath))
    return len(found)


def _fetch_plain(store: StoreFS, key: str, final: Path) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{final.name}{TEMP_TAG}{uuid.uuid4().hex[:12]}")
    try:
        store.retry.call(lambda: store.fs.get_file(key, str(tmp)), what=f"download {key}")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def upload_plain(local_dir: Path, url: str, *, regex: str | None = None,
                 storage_options: dict[str, Any] | None = None,
                 retry: RetryPolicy | None = None) -> int:
    """OSMO's checkpoint upload: ``local_dir`` -> ``url/<basename>/...``; files sent."""
    local_dir = Path(local_dir)
    pattern = re.compile(regex) if regex else None
    name = Path(os.path.abspath(local_dir)).name
    store = StoreFS(f"{url.rstrip('/')}/{name}", retry=retry or RetryPolicy(),
                    storage_options=storage_options)
    sent = 0
    try:
        for file in take_snapshot(local_dir).files:
            if pattern is not None and not pattern.search(file.relpath):
                continue
            if store.is_local:
                store.ingest_plain_local(file.path, file.relpath)
            else:
                store.put_file(file.path, file.relpath)
            sent += 1
    except StoreOperationError as error:
        raise CheckpointError(f"upload of {local_dir} to {url} failed: {error}") from None
    return sent
