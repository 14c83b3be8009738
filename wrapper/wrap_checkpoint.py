"""The wrapper's side of ``--checkpoint-url``: restore at start, sync, publish at exit.

When a URL is given the wrapper owns the store: it restores the newest complete
checkpoint into an empty ``--checkpoint-dir`` before the first attempt, keeps a
:class:`PeriodicSyncer` running across attempts, and always publishes once more before
it exits (the history under ``<checkpoint-dir>/.resched`` travels with it), so a
cancel or a reschedule never loses the last checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wrapper.checkpoint.errors import SnapshotUnstableError
from wrapper.checkpoint.snapshot import checkpoint_step
from wrapper.outcome import emit_event, say


class CheckpointSession:
    def __init__(self, url: str | None, local_dir: Path | None, sync_every_s: float | None) -> None:
        self.url = url
        self.local_dir = local_dir
        self.sync_every_s = sync_every_s
        self._store: Any = None
        self._syncer: Any = None
        self._finished = False

    @property
    def active(self) -> bool:
        return bool(self.url) and self.local_dir is not None

    def step(self) -> int | None:
        """The step the training would resume from (marker, else its framework's files)."""
        return checkpoint_step(self.local_dir)

    def restore(self) -> int | None:
        """Restore into an empty (or missing) local dir; the restored step, or None."""
        if not self.active:
            return None
        assert self.local_dir is not None
        from wrapper.checkpoint.store import CheckpointStore

        self._store = CheckpointStore(str(self.url))
        if self.local_dir.exists() and any(self.local_dir.iterdir()):
            say(f"checkpoint: {self.local_dir} is not empty; keeping it (no restore)")
            return None
        self.local_dir.mkdir(parents=True, exist_ok=True)
        result = self._store.restore(self.local_dir)
        if result is None:
            say(f"checkpoint: store {self.url} is empty; starting from scratch")
            return None
        emit_event("checkpoint_restored", {
            "step": result.step, "url": self.url, "checkpoint_id": result.checkpoint_id,
            "seconds": result.seconds, "fell_back_from": list(result.fell_back_from),
        })
        say(f"checkpoint: restored step {result.step} from {self.url}")
        return result.step  # type: ignore[no-any-return]

    def start_sync(self) -> None:
        if not self.active or not self.sync_every_s or self._store is None:
            return
        from wrapper.checkpoint.syncer import PeriodicSyncer

        assert self.local_dir is not None
        self._syncer = PeriodicSyncer(self.local_dir, self._store, self.sync_every_s)
        self._syncer.start()

    def finish(self) -> None:
        """The final publish before any exit; never raises (the exit code matters more)."""
        if not self.active or self._finished:
            return
        self._finished = True
        try:
            if self._syncer is not None:
                result = self._syncer.stop(final=True)
            elif self._store is not None and self.local_dir is not None and self.local_dir.is_dir():
                # No timer, but the upload after exit always happens (OSMO's rule).
                result = self._store.publish(self.local_dir, final=True, layouts=True)
            else:
                result = None
        except SnapshotUnstableError as why:
            say(f"checkpoint: final publish skipped: {why}")
            return
        except Exception as error:  # noqa: BLE001 - report and go on to exit
            say(f"checkpoint: final publish to {self.url} FAILED: {type(error).__name__}: {error}")
            return
        if result is not None:
            say(f"checkpoint: final publish of step {result.step} to {self.url} "
                f"({result.uploaded_files} files sent)")
