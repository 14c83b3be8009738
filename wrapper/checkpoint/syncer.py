"""PeriodicSyncer: publish a checkpoint directory on OSMO's timer, from a background thread.

Timer semantics as OSMO's ``checkpoint:``: the first publish happens one period after
``start()``, the next one period after the previous one ended, and ``stop()`` runs one
final publish, whatever ended the training. A round publishes only when the directory
changed since the last publish and only a complete snapshot (see ``snapshot.py``: the
completion marker; else the framework's own layout, its unfinished checkpoints left out;
else, optionally, nothing changed for ``settle_s``; stats re-checked after the upload).
An incomplete snapshot is skipped and retried sooner (``retry_soon_s``). The final
publish uploads what is there (nothing can change any more), unless it is torn and the
store already holds a complete checkpoint. The thread lives in the wrapper process, never in the
training, so an upload never blocks a training step. A per-directory lock file (fcntl,
released by the kernel if the holder dies) keeps two publishes of the same directory
from running at once, also across processes.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from wrapper.checkpoint.dirlock import DirLock
from wrapper.checkpoint.errors import CheckpointBusyError, CheckpointError, SnapshotUnstableError
from wrapper.checkpoint.results import PublishResult
from wrapper.checkpoint.snapshot import take_snapshot
from wrapper.checkpoint.store import CheckpointStore
from wrapper.durations import parse_duration

UNCHANGED = "unchanged since the last publish"


def _stderr_line(text: str) -> None:
    print(f"resched: checkpoint {text}", file=sys.stderr, flush=True)


class PeriodicSyncer:
    def __init__(self, local_dir: Path, store: CheckpointStore, frequency_s: float | str, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] | None = None,
                 settle_s: float = 2.0, retry_soon_s: float | None = None,
                 final_wait_s: float = 300.0, log: Callable[[str], None] = _stderr_line,
                 regex: str | None = None) -> None:
        self.local_dir = Path(local_dir)
        self.store = store
        self.frequency_s = parse_duration(frequency_s, where="checkpoint frequency")
        if self.frequency_s <= 0:
            raise CheckpointError("checkpoint frequency must be positive",
                                  fix="give a period such as 60, 5m or PT5M")
        self.settle_s = settle_s
        self.regex = regex
        self._warned: set[str] = set()
        self.retry_soon_s = min(self.frequency_s, 5.0) if retry_soon_s is None else retry_soon_s
        self.final_wait_s = final_wait_s
        self._clock = clock
        self._stopping = threading.Event()
        self._sleep = sleep or self._stopping.wait
        self._log = log
        self._in_process = threading.Lock()
        self._thread: threading.Thread | None = None
        self._published_signature: frozenset | None = None
        self.results: list[PublishResult] = []
        self.last_error: CheckpointError | None = None
        self.last_skip: str | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise CheckpointError("this syncer was already started")
        self._thread = threading.Thread(target=self.run_loop, name="resched-checkpoint-sync",
                                        daemon=True)
        self._thread.start()

    def stop(self, *, final: bool = True) -> PublishResult | None:
        """Stop the timer (waiting for a publish in flight), then publish once more."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if not final:
            return None
        result = self.sync_once(final=True)
        if result is None and self.last_skip == UNCHANGED and self.results:
            return self.results[-1]  # the directory's final state is already published
        return result

    def run_loop(self) -> None:
        """The timer loop (``start`` runs it in a thread; tests may call it directly)."""
        due = self._clock() + self.frequency_s
        while not self._stopping.is_set():
            delay = due - self._clock()
            if delay > 0:
                self._sleep(delay)
                continue
            try:
                self.sync_once()
            except Exception as bug:  # noqa: BLE001 (the timer must outlive any one round)
                self.last_skip = None
                self._log(f"sync round failed unexpectedly: {type(bug).__name__}: {bug}")
            retry_soon = self.last_skip is not None and self.last_skip.startswith("incomplete")
            due = self._clock() + (self.retry_soon_s if retry_soon else self.frequency_s)

    def sync_once(self, *, final: bool = False) -> PublishResult | None:
        """One round: publish if the directory changed and is complete. Never raises
        for store or snapshot trouble (it is recorded and logged instead)."""
        self.last_skip = None
        with self._in_process, DirLock(self.local_dir) as lock:
            try:
                if not lock.acquire(wait_s=self.final_wait_s if final else 0.0):
                    return self._skip("busy: another process is publishing this directory")
                signature = take_snapshot(self.local_dir).signature
                if signature == self._published_signature and not final:
                    return self._skip(UNCHANGED)  # (the final one runs anyway: see stop())
                self._warn_once(self.local_dir)
                result = self.store.publish(self.local_dir, settle_s=self.settle_s, final=final,
                                            regex=self.regex, layouts=True)
            except SnapshotUnstableError as why:
                return self._skip(f"incomplete: {why}")
            except CheckpointBusyError as why:
                return self._skip(f"busy: {why}")
            except CheckpointError as error:
                self.last_error = error
                self._log(f"publish failed (will retry next period): {error}")
                return None
        self._published_signature = signature
        self.results.append(result)
        if result.changed:
            self._log(f"published step {result.step} to {result.url}: {result.files} files, "
                      f"{result.uploaded_bytes} bytes sent in {result.seconds:.1f} s")
        return result

    def _warn_once(self, directory: Path) -> None:
        from wrapper.checkpoint.layouts import inspect_layout

        for warning in inspect_layout(directory).warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                self._log(f"warning: {warning}")

    def _skip(self, why: str) -> PublishResult | None:
        self.last_skip = why
        if why.startswith(("incomplete", "busy")):
            self._log(f"publish skipped: {why}")
        return None
