"""What a store owns, and the proof a URL is a store before anything is written to it.

A store is identified by ``<root>/resched-store.json`` (format, a random id, the time),
written by the first publish under the writer lease. Publish refuses:
- a non-empty location without that file (it is someone else's directory or bucket;
  a store made before identity files, recognised by a valid ``latest`` pointer, is
  adopted by writing the file);
- on local disks, a store whose own entries (``objects/``, ``objects/<xx>/``,
  ``manifests/``, ``latest``, the identity and lock files) are symlinks or of the wrong
  kind: writing or collecting garbage through them would touch files outside the store.

Garbage collection deletes only names of the store's own scheme (see ``is_own_temp``,
``layout.blob_sha``, ``layout.manifest_ids``) and, on local disks, only regular files
reached without following a link (``StoreFS.list_files``).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
import uuid

from wrapper.checkpoint.errors import CheckpointError
from wrapper.checkpoint.manifest import Pointer
from wrapper.checkpoint.snapshot import TEMP_TAG
from wrapper.checkpoint.storefs import StoreFS
from wrapper.redact import redact

IDENTITY_KEY = "resched-store.json"
IDENTITY_FORMAT = "resched-store/1"
LOCK_NAME = ".lock"
_OWN_DIRS = ("objects", "manifests")
_OWN_FILES = ("latest", IDENTITY_KEY, LOCK_NAME, "lease")
# A first publish holds the lease before it writes the identity: a location holding
# only a lease is a store being created (the lease then reports who is busy).
_LEASE_NAMES = {LOCK_NAME, "lease"}
# Temp names this package writes: "<name>.resched-tmp-<uuid4 hex>" (storefs, restore).
_OWN_TEMP = re.compile(rf"^[^/]*{re.escape(TEMP_TAG)}[0-9a-f]{{32}}$")


def is_own_temp(relkey: str) -> bool:
    """A temp file a killed write of ours left: in the root, manifests/ or objects/."""
    folder, _, name = relkey.rpartition("/")
    in_own_place = folder in ("", "manifests", "objects") or (
        folder.startswith("objects/") and len(folder) == len("objects/xx"))
    return in_own_place and _OWN_TEMP.match(name) is not None


def _refuse(store: StoreFS, why: str, fix: str) -> CheckpointError:
    return CheckpointError(f"refusing to publish to {redact(store.url)}: {why}", fix=fix)


def check_local_layout(store: StoreFS) -> bool:
    """For a local store: raise when its own entries are links or of the wrong kind;
    True when the root holds anything at all."""
    root = store.local_path("")
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(store, f"{root} is not a directory", "pass a directory for the store")
    with os.scandir(root) as found:
        names = {entry.name for entry in found}
    for name in _OWN_DIRS + _OWN_FILES:
        if name not in names:
            continue
        mode = os.lstat(root / name).st_mode
        want_dir = name in _OWN_DIRS
        if stat.S_ISLNK(mode) or (want_dir and not stat.S_ISDIR(mode)) or (
                not want_dir and not stat.S_ISREG(mode)):
            raise _refuse(store, f"{root / name} is a symlink or not a "
                          f"{'directory' if want_dir else 'regular file'}; the store must not "
                          "write or delete through it",
                          "publish to a new, empty directory (the store's own folders must be "
                          "real directories inside it)")
    objects = root / "objects"
    if "objects" in names:
        with os.scandir(objects) as found:
            for entry in found:
                if entry.is_symlink():
                    raise _refuse(store, f"{objects / entry.name} is a symlink",
                                  "publish to a new, empty directory")
    return bool(names - _LEASE_NAMES)


def _top_level(store: StoreFS) -> list[str]:
    def listing() -> list[str]:
        try:
            found = store.fs.ls(store.key(""), detail=False)
        except FileNotFoundError:
            return []
        return [str(name).rstrip("/").rsplit("/", 1)[-1] for name in found]
    return store.retry.call(listing, what=f"list {store.key('')}")


def _valid_identity(raw: bytes) -> bool:
    try:
        data = json.loads(raw)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("format") == IDENTITY_FORMAT


def check_owned(store: StoreFS) -> bool:
    """Read-only: raise unless the URL is our store or empty. True when the identity
    file must still be written (an empty location, or a store from before identities)."""
    nonempty = check_local_layout(store) if store.is_local else None
    raw = store.read_bytes(IDENTITY_KEY)
    if raw is not None:
        if not _valid_identity(raw):
            raise _refuse(store, f"{IDENTITY_KEY} is not a resched store identity",
                          "publish to a new, empty location")
        return False
    if nonempty is None:
        nonempty = bool(set(_top_level(store)) - _LEASE_NAMES)
    if not nonempty:
        return True
    # Another resched writer may have created the store between our identity read and the
    # listing (it writes the identity before anything else): read it again before
    # calling the location foreign. Seen with 6 writers racing for one new S3 prefix.
    raw = store.read_bytes(IDENTITY_KEY)
    if raw is not None and _valid_identity(raw):
        return False
    pointer = store.read_bytes("latest")
    if pointer is not None:
        try:
            Pointer.from_bytes(pointer, where="latest")
            return True  # a store published before identity files existed: adopt it
        except CheckpointError:
            pass
    raise _refuse(store, "it is not empty and is not a resched checkpoint store (no "
                  f"{IDENTITY_KEY}); publishing would mix our files with, and later "
                  "collect, files that are not ours",
                  "publish to a new, empty directory or prefix")


def write_identity(store: StoreFS) -> None:
    data = {"format": IDENTITY_FORMAT, "id": uuid.uuid4().hex, "created": time.time()}
    store.write_bytes(IDENTITY_KEY, json.dumps(data).encode())
