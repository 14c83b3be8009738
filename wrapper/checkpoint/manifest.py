"""Manifests and the ``latest`` pointer: the two small JSON documents of a store.

A manifest lists one checkpoint's files (relative path, size, sha256) plus its step,
time and producer. A small file may live in a pack (format 2): a blob that holds many
small files one after the other; its entry then also names the pack and the offset.
Format 1 (every file its own blob) is still read, and still written when a checkpoint
uses no pack, so older resched versions keep reading such stores. The pointer is the single source of truth of which checkpoints are
complete: it names the newest one and keeps the list of the last K complete ones, each
with the sha256 of its manifest bytes, so a damaged manifest is detected before use.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from wrapper.checkpoint.errors import CheckpointError, UnsafePathError
from wrapper.checkpoint.marker import MARKER_NAME

FORMAT = "resched-checkpoint/1"  # the pointer's, and manifests without packs
PACKED_FORMAT = "resched-checkpoint/2"  # manifests with packs (a "packs" list)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ID = re.compile(r"^[0-9A-Za-z._-]{1,120}$")
_BAD_PARTS = frozenset(("", ".", ".."))


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, "/"-separated, checked by safe_relpath
    size: int
    sha256: str  # of the file's own bytes, packed or not
    pack: str | None = None  # the sha256 of the pack blob holding it; None: its own blob
    offset: int = 0  # where its bytes start in the pack

    @property
    def blob(self) -> str:
        """The blob that holds this file's bytes."""
        return self.pack or self.sha256


@dataclass(frozen=True)
class Pack:
    sha256: str
    size: int


@dataclass(frozen=True)
class Producer:
    host: str
    pid: int
    version: str


@dataclass(frozen=True)
class Manifest:
    checkpoint_id: str
    step: int | None
    time: float
    producer: Producer
    files: tuple[FileEntry, ...]
    packs: tuple[Pack, ...] = ()  # every pack a file entry names, each once

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    def blobs(self) -> dict[str, int]:
        """sha256 -> size of every blob this checkpoint needs (single files and packs)."""
        found = {e.sha256: e.size for e in self.files if e.pack is None}
        found.update((pack.sha256, pack.size) for pack in self.packs)
        return found

    def same_content(self, other: Manifest) -> bool:
        """Same step and files (path, size, sha256: where the bytes are stored does not
        matter). The marker's bytes do not count: a restore re-stamps its file list, and
        that alone must not make a new checkpoint of the same step."""
        def body(m: Manifest) -> tuple[tuple[str, int, str], ...]:
            return tuple((e.path, e.size, e.sha256) for e in m.files if e.path != MARKER_NAME)
        return self.step == other.step and body(self) == body(other)

    def to_bytes(self) -> bytes:
        data: dict[str, Any] = {
            "format": PACKED_FORMAT if self.packs else FORMAT,
            "id": self.checkpoint_id,
            "step": self.step,
            "time": self.time,
            "producer": vars(self.producer),
        }
        if self.packs:
            index = {pack.sha256: number for number, pack in enumerate(self.packs)}
            data["packs"] = [[pack.sha256, pack.size] for pack in self.packs]
            data["files"] = [[e.path, e.size, e.sha256] if e.pack is None else
                             [e.path, e.size, e.sha256, index[e.pack], e.offset]
                             for e in self.files]
        else:
            data["files"] = [[e.path, e.size, e.sha256] for e in self.files]
        try:
            return json.dumps(data, ensure_ascii=False, indent=0).encode()
        except UnicodeEncodeError:
            # A file name that is not UTF-8 (os.walk gives it as lone surrogates): \u
            # escapes keep its exact bytes, and the manifest stays valid UTF-8 JSON.
            return json.dumps(data, ensure_ascii=True, indent=0).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, *, where: str) -> Manifest:
        data = _load_json(raw, where, (FORMAT, PACKED_FORMAT))
        try:
            producer = data.get("producer") or {}
            packs = _packs(data, where)
            files = _entries(data["files"], packs, where)
            manifest = cls(
                checkpoint_id=_checked_id(data["id"], where),
                step=_optional_step(data.get("step"), where),
                time=float(data["time"]),
                producer=Producer(
                    str(producer.get("host", "?")),
                    int(producer.get("pid", 0)),
                    str(producer.get("version", "?")),
                ),
                files=files,
                packs=packs,
            )
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"manifest is malformed ({error})", where=where) from None
        check_tree(manifest.files, where=where)
        return manifest


@dataclass(frozen=True)
class CheckpointRef:
    """One complete checkpoint as the pointer records it."""

    checkpoint_id: str
    step: int | None
    time: float
    manifest_sha256: str
    files: int
    size: int


@dataclass(frozen=True)
class Pointer:
    checkpoints: tuple[CheckpointRef, ...]  # newest first; [0] is latest

    @property
    def latest(self) -> CheckpointRef | None:
        return self.checkpoints[0] if self.checkpoints else None

    def to_bytes(self) -> bytes:
        refs = [vars(ref) for ref in self.checkpoints]
        data = {"format": FORMAT, "latest": refs[0]["checkpoint_id"] if refs else None,
                "checkpoints": refs}
        return json.dumps(data, indent=1).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, *, where: str) -> Pointer:
        data = _load_json(raw, where)
        try:
            refs = tuple(
                CheckpointRef(
                    checkpoint_id=_checked_id(item["checkpoint_id"], where),
                    step=_optional_step(item.get("step"), where),
                    time=float(item["time"]),
                    manifest_sha256=_checked_sha(item["manifest_sha256"], where),
                    files=int(item["files"]),
                    size=int(item["size"]),
                )
                for item in data["checkpoints"]
            )
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"latest pointer is malformed ({error})", where=where) from None
        return cls(refs)


def manifest_ref(manifest: Manifest, raw: bytes) -> CheckpointRef:
    return CheckpointRef(
        checkpoint_id=manifest.checkpoint_id,
        step=manifest.step,
        time=manifest.time,
        manifest_sha256=hashlib.sha256(raw).hexdigest(),
        files=len(manifest.files),
        size=manifest.total_bytes,
    )


def safe_relpath(path: object, *, where: str) -> str:
    """``path`` when it is a clean relative path that stays inside its directory."""
    if not isinstance(path, str) or not path:
        raise UnsafePathError(f"path {path!r} is not a non-empty string", where=where)
    # POSIX rules only: "A:" or "C:x" are ordinary names on Linux (refusing them made
    # such files publishable but never restorable). Backslashes are refused because
    # publish refuses them too (not portable to object stores and Windows tools).
    bad = (
        "\x00" in path
        or "\\" in path
        or path.startswith("/")
        or not _BAD_PARTS.isdisjoint(path.split("/"))
    )
    if bad:
        raise UnsafePathError(
            f"path {path!r} would escape the checkpoint directory",
            where=where,
            fix="a manifest path must be relative, '/'-separated, without '..', '.', "
            "empty parts or backslashes; the store may be tampered with",
        )
    try:
        os.fsencode(path)  # lone surrogates other than the undecodable-byte escapes
    except UnicodeEncodeError:
        raise UnsafePathError(f"path {path!r} is not a file name this system can write",
                              where=where) from None
    return path


def check_tree(entries: tuple[FileEntry, ...], *, where: str) -> None:
    """Refuse duplicate paths and a file that is also another file's directory."""
    paths = {entry.path for entry in entries}
    if len(paths) != len(entries):
        raise UnsafePathError("manifest lists a path twice", where=where)
    # every folder a path lies in, each folder once (100k files share a few folders)
    parents = {entry.path.rpartition("/")[0] for entry in entries} - {""}
    folders: set[str] = set()
    for parent in parents:
        while parent and parent not in folders:
            folders.add(parent)
            parent = parent.rpartition("/")[0]
    clash = folders & paths
    if clash:
        inside = next(e.path for e in entries if e.path.startswith(min(clash) + "/"))
        raise UnsafePathError(f"path {inside!r} lies under a file of the same manifest",
                              where=where)


def _packs(data: dict[str, Any], where: str) -> tuple[Pack, ...]:
    if data["format"] == FORMAT:
        return ()  # format 1 has no packs (a "packs" key there is not ours to trust)
    packs = tuple(Pack(_checked_sha(sha, where), _count(size, "pack size"))
                  for sha, size in data["packs"])
    if len({pack.sha256 for pack in packs}) != len(packs):
        raise ValueError("a pack is listed twice")
    return packs


class _CheckOneByOne(Exception):
    """The bulk checks did not accept every entry: check them one by one (which names
    the bad one, or accepts what the bulk checks are stricter about)."""


# A path part that is empty, "." or "..", or a backslash, in paths joined by NUL
_BAD_IN_PATHS = re.compile(r"\\|(?:^|[/\x00])\.{0,2}(?=[/\x00]|\Z)")
_SHA256S = re.compile(r"(?:[0-9a-f]{64}\x00)*")


def _entries(items: Any, packs: tuple[Pack, ...], where: str) -> tuple[FileEntry, ...]:
    """Every file entry of a manifest, with the checks of :func:`_entry`. 100k entries:
    one plain loop builds them and the paths and digests are checked all at once (a
    regex over their NUL-joined text: C, not Python, per entry); only a manifest that
    fails a bulk check is checked entry by entry (for the message)."""
    try:
        return _entries_in_bulk(items, packs)
    except _CheckOneByOne:
        return tuple(_entry(item, packs, where) for item in items)


def _entries_in_bulk(items: Any, packs: tuple[Pack, ...]) -> tuple[FileEntry, ...]:
    if type(items) is not list:
        raise _CheckOneByOne
    pack_shas = [pack.sha256 for pack in packs]
    pack_sizes = [pack.size for pack in packs]
    count = len(packs)
    entries: list[FileEntry] = []
    paths: list[Any] = []
    shas: list[Any] = []
    for item in items:
        if type(item) is not list:
            raise _CheckOneByOne
        if len(item) == 5:
            path, size, sha, index, offset = item
            # type() is int: a bool is refused, as _count refuses it
            if type(size) is not int or type(offset) is not int or type(index) is not int \
                    or size < 0 or offset < 0 or not 0 <= index < count \
                    or offset + size > pack_sizes[index]:
                raise _CheckOneByOne
            entries.append(FileEntry(path, size, sha, pack_shas[index], offset))
        elif len(item) == 3:
            path, size, sha = item
            if type(size) is not int or size < 0:
                raise _CheckOneByOne
            entries.append(FileEntry(path, size, sha))
        else:
            raise _CheckOneByOne
        paths.append(path)
        shas.append(sha)
    try:
        joined = "\x00".join(paths)  # TypeError: a path that is not a string
        digests = "\x00".join(shas)
    except TypeError:
        raise _CheckOneByOne from None
    if paths and (joined.count("\x00") != len(paths) - 1 or _BAD_IN_PATHS.search(joined)
                  or not _SHA256S.fullmatch(digests + "\x00")):
        raise _CheckOneByOne  # a NUL, an unsafe path or a bad digest somewhere
    try:
        os.fsencode(joined)  # as safe_relpath: a name this system can write
    except UnicodeEncodeError:
        raise _CheckOneByOne from None
    return tuple(entries)


def _entry(item: Any, packs: tuple[Pack, ...], where: str) -> FileEntry:
    if len(item) == 3:
        path, size, sha = item
        return FileEntry(safe_relpath(path, where=where), _count(size, f"size of {path!r}"),
                         _checked_sha(sha, where))
    path, size, sha, index, offset = item  # format 2: packed
    if not packs or isinstance(index, bool) or not isinstance(index, int) \
            or not 0 <= index < len(packs):
        raise ValueError(f"{path!r} names no pack of this manifest")
    size, offset = _count(size, f"size of {path!r}"), _count(offset, f"offset of {path!r}")
    if offset + size > packs[index].size:
        raise ValueError(f"{path!r} lies beyond the end of its pack")
    return FileEntry(safe_relpath(path, where=where), size, _checked_sha(sha, where),
                     packs[index].sha256, offset)


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"bad {what} {value!r}")
    return value


def _checked_sha(value: object, where: str) -> str:
    if not isinstance(value, str) or not _SHA256.match(value):
        raise CheckpointError(f"{value!r} is not a sha256 hex digest", where=where)
    return value


def _checked_id(value: object, where: str) -> str:
    if not isinstance(value, str) or not _ID.match(value) or value in (".", ".."):
        raise UnsafePathError(f"checkpoint id {value!r} is not a plain name", where=where)
    return value


def _optional_step(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"step {value!r} is not a non-negative int", where=where)
    return value


def _load_json(raw: bytes, where: str, formats: tuple[str, ...] = (FORMAT,)) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError as error:
        raise CheckpointError(f"not valid JSON ({error})", where=where) from None
    if not isinstance(data, dict) or data.get("format") not in formats:
        raise CheckpointError(f"not a {' or '.join(formats)} document", where=where,
                              fix="a newer resched may have written it: upgrade resched")
    return data
