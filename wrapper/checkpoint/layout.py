"""Where things live in a store, and reading the pointer and manifests safely.

```
<root>/latest                      the pointer (JSON, one PUT / tmp + rename)
<root>/manifests/<id>.json         one per checkpoint (written after its blobs)
<root>/objects/<sha[:2]>/<sha256>  file contents, content-addressed, shared
<root>/lease | <root>/.lock        the single-writer lease (object stores | local)
```
"""

from __future__ import annotations

import hashlib
import socket
import time
import uuid

from wrapper.checkpoint.errors import CheckpointError
from wrapper.checkpoint.manifest import CheckpointRef, Manifest, Pointer, Producer
from wrapper.checkpoint.storefs import StoreFS

POINTER_KEY = "latest"
MANIFESTS = "manifests/"
OBJECTS = "objects/"


def manifest_key(checkpoint_id: str) -> str:
    return f"{MANIFESTS}{checkpoint_id}.json"


def blob_key(sha256: str) -> str:
    return f"{OBJECTS}{sha256[:2]}/{sha256}"


def blob_sha(key: str) -> str | None:
    """The sha256 a key under objects/ holds, or None for anything else (temp files)."""
    name = key.rsplit("/", 1)[-1]
    return name if len(name) == 64 and key == blob_key(name) else None


def new_checkpoint_id(step: int | None, now: float) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"{now % 1:.6f}"[1:]
    return f"{'s' if step is None else step}-{stamp}Z-{uuid.uuid4().hex[:8]}"


def producer() -> Producer:
    import os

    from wrapper.version import VERSION

    return Producer(socket.gethostname(), os.getpid(), VERSION)


def read_pointer(store: StoreFS) -> Pointer | None:
    raw = store.read_bytes(POINTER_KEY)
    if raw is None:
        return None
    return Pointer.from_bytes(raw, where=store.key(POINTER_KEY))


def read_manifest(store: StoreFS, ref: CheckpointRef) -> Manifest:
    """The manifest ``ref`` names, checked against the sha256 the pointer recorded."""
    where = store.key(manifest_key(ref.checkpoint_id))
    raw = store.read_bytes(manifest_key(ref.checkpoint_id))
    if raw is None:
        raise CheckpointError("manifest is missing", where=where)
    if hashlib.sha256(raw).hexdigest() != ref.manifest_sha256:
        raise CheckpointError("manifest does not match the sha256 in the pointer", where=where)
    manifest = Manifest.from_bytes(raw, where=where)
    if manifest.checkpoint_id != ref.checkpoint_id:
        raise CheckpointError("manifest id differs from its name", where=where)
    return manifest


def manifest_ids(store: StoreFS) -> dict[str, str]:
    """checkpoint id -> key, for every manifest object (committed or not)."""
    found = {}
    for key in store.list_files(MANIFESTS):
        name = key.removeprefix(MANIFESTS)
        if "/" not in name and name.endswith(".json"):
            found[name[: -len(".json")]] = key
    return found
