"""Conditional writes on object stores: compare-and-swap where the backend has it.

S3 (and compatible servers such as SeaweedFS) take ``If-None-Match: *`` (create only if
absent) and ``If-Match: <etag>`` (replace only the version we read) on PUT and answer
412 when the condition does not hold. That turns the store's lease into a real lock and
the commit of ``latest`` into an optimistic update: a writer whose view of the pointer
is out of date is refused instead of silently dropping another writer's checkpoint.
Backends without conditional writes (local disks use a kernel lock instead) get None
from ``put_if`` and keep the best-effort path.
"""

from __future__ import annotations

from wrapper.checkpoint.storefs import StoreFS


def supported(store: StoreFS) -> bool:
    """Whether the store's backend takes S3's conditional-write headers."""
    if store.is_local:
        return False
    protocol = getattr(store.fs, "protocol", ())
    protocols = (protocol,) if isinstance(protocol, str) else tuple(protocol)
    return any(p in ("s3", "s3a") for p in protocols)


def put_if(store: StoreFS, relkey: str, data: bytes, **condition: str) -> bool | None:
    """Write ``relkey`` under ``IfNoneMatch="*"`` or ``IfMatch=etag``: True written, False
    refused (the object is not what the condition says), None without conditional writes."""
    if not supported(store):
        return None

    def put() -> bool:
        try:
            store.fs.pipe_file(store.key(relkey), data, **condition)
        except OSError as error:
            if _precondition_failed(error):
                return False
            raise
        return True
    return store.retry.call(put, what=f"write {store.key(relkey)} ({', '.join(condition)})")


def etag(store: StoreFS, relkey: str) -> str | None:
    """The current version tag of ``relkey``; None when it does not exist (or no support)."""
    if not supported(store):
        return None

    def head() -> str | None:
        store.fs.invalidate_cache(store.key(relkey))
        try:
            info = store.fs.info(store.key(relkey))
        except FileNotFoundError:
            return None
        tag = info.get("ETag") or info.get("etag")
        return str(tag) if tag else None
    return store.retry.call(head, what=f"stat {store.key(relkey)}")


def _precondition_failed(error: BaseException) -> bool:
    text = f"{error} {error.__cause__ or ''} {error.__context__ or ''}".lower()
    return "precondition" in text or "pre-condition" in text or "412" in text
