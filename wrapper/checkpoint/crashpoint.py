"""Crash points: named steps of the store's protocols where a test can kill the process.

``RESCHED_CRASHPOINT=<step>:<SIGNAL>`` (e.g. ``publish.after_manifest:SIGKILL``) makes
the process send itself that signal when it reaches ``<step>``; ``<step>#N`` waits for
the N-th time the step is reached (a step inside a loop). ``SIGSTOP`` holds the process
at the step until a test sends SIGCONT (e.g. to change the directory under a publish at
an exact point). The variable is read once, at import: when it is unset, :func:`reached`
is one comparison with ``None``.

The steps, and the invariant that holds after each, are listed in docs/checkpoint.md
("Crash consistency, step by step"); ``STEPS`` is the same list, so a test can walk all
of them and a typo in a step name is refused instead of never firing.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "RESCHED_CRASHPOINT"

# (protocol step, where in the code) -- docs/checkpoint.md explains each invariant.
STEPS: tuple[str, ...] = (
    "publish.after_lease",         # writer lease held, nothing written
    "publish.after_identity",      # the store identity written (first publish)
    "publish.after_blob",          # one new blob written (repeat with #N)
    "publish.after_pack",          # one new pack of small files written (repeat with #N)
    "publish.after_blobs",         # every new blob written, not yet fsynced
    "publish.after_fsync",         # blobs durable
    "publish.after_manifest",      # the manifest written, `latest` not moved
    "commit.before_pointer",       # about to move `latest`
    "commit.after_pointer",        # `latest` moved: the checkpoint is committed
    "gc.after_manifests",          # retired manifests deleted
    "gc.after_blob",               # one unreferenced blob deleted (repeat with #N)
    "publish.before_release",      # GC done, lease still held
    "restore.after_stage_dir",     # the staging directory exists, empty
    "restore.after_file",          # one file staged (repeat with #N)
    "restore.after_verify",        # every file staged, verified and fsynced
    "restore.after_swap",          # the staged tree is in place
    "restore.after_cleanup",       # staging leftovers (the old tree) removed
    "startup.before_restore",      # the wrapper's start-up restore, healing done
)


def _parse(value: str | None) -> tuple[str, int, int] | None:
    if not value:
        return None
    where, _, sig_name = value.rpartition(":")
    step, _, count = where.partition("#")
    if step not in STEPS:
        raise ValueError(f"{ENV}={value!r}: unknown step {step!r} (known: {', '.join(STEPS)})")
    signum = getattr(signal, sig_name.upper(), None)
    if not isinstance(signum, int):
        raise ValueError(f"{ENV}={value!r}: {sig_name!r} is not a signal name such as SIGKILL")
    return step, int(count or 1), signum


_TARGET = _parse(os.environ.get(ENV))
_hits = 0
_lock = threading.Lock()


def reached(step: str) -> None:
    """Called at each protocol step; kills the process there when a test asked for it."""
    if _TARGET is None or _TARGET[0] != step:
        return
    global _hits
    with _lock:
        _hits += 1
        if _hits != _TARGET[1]:
            return
    if _TARGET[2] == signal.SIGSTOP:
        # A test holds the process here. Sent to this very thread: sent to the process,
        # the main thread takes it and the thread at the step (a publish runs in the
        # syncer's) ran on for a few ms, past the step, before the group stop reached it.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
        return
    # SIGINT: Python raises KeyboardInterrupt in the main thread at its next bytecode,
    # i.e. here when the step runs in the main thread (as commit and restore do).
    os.kill(os.getpid(), _TARGET[2])
