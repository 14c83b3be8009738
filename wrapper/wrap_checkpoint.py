"""The wrapper's side of ``--checkpoint-url``: restore at start, sync, publish at exit.

When a URL is given the wrapper owns the store: it restores the newest complete
checkpoint into an empty ``--checkpoint-dir`` before the first attempt, keeps a
:class:`PeriodicSyncer` running across attempts, and always publishes once more before
it exits (the history under ``<checkpoint-dir>/.resched`` travels with it), so a
cancel or a reschedule never loses the last checkpoint.

Between attempts: when a retry in place follows an attempt that left a checkpoint newer
than the last one in the store, that checkpoint is published from a background thread
while the next attempt starts (``publish_behind``), so the launch never waits for an
upload. This is safe although the next attempt may write the directory again: a round
only uploads a complete snapshot (the framework's finished checkpoints, unfinished ones
left out) whose stats are unchanged after the upload, else it is skipped and nothing is
published; the store's ``latest`` never points at a torn checkpoint. ``finish`` waits for
such a round before the final publish.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from wrapper.checkpoint.errors import SnapshotUnstableError
from wrapper.checkpoint.snapshot import checkpoint_step
from wrapper.outcome import emit_event, say

# A background round skipped because the next attempt was writing is tried again soon.
_RETRY_FIRST_S = 0.25
_RETRY_MAX_S = 5.0


class CheckpointSession:
    def __init__(self, url: str | None, local_dir: Path | None, sync_every_s: float | None) -> None:
        self.url = url
        self.local_dir = local_dir
        self.sync_every_s = sync_every_s
        self._store: Any = None
        self._syncer: Any = None
        self._finished = False
        self._synced_step: int | None = None  # the newest step known to be in the store
        self._behind: threading.Thread | None = None  # the round started by publish_behind
        self._oneshot: Any = None  # a PeriodicSyncer never started: its lock, no timer
        self._stop_behind = threading.Event()
        self._owner: Any = None  # the directory's ``wrap`` lock (dirlock.py), held for life

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

        from wrapper.checkpoint import crashpoint
        from wrapper.checkpoint.restore_swap import heal

        self.own()
        self._store = CheckpointStore(str(self.url))
        # A start-up restore that was killed is finished (journaled) or undone (staged)
        # first: never kept half-done, never mistaken for a checkpoint to resume from.
        for done in heal(self.local_dir):
            say(f"checkpoint: {done}")
        crashpoint.reached("startup.before_restore")
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
        self._synced_step = result.step
        return result.step  # type: ignore[no-any-return]

    def own(self) -> None:
        """Take the directory's ``wrap`` lock before anything touches it: a second wrapper
        on the same directory is refused here, with one line, before either heals or
        restores (the lock lives outside the directory, which restore wants empty, and
        survives the restore's rename onto it). Refused, this session touches nothing:
        no set-aside, no final publish of a directory another wrapper owns."""
        if self._owner is not None or self.local_dir is None:
            return
        from wrapper.checkpoint.dirlock import CheckpointDirBusy, own_checkpoint_dir
        from wrapper.checkpoint.errors import CheckpointError

        try:
            self._owner = own_checkpoint_dir(self.local_dir)
        except CheckpointDirBusy:
            self.abandon()
            raise
        except CheckpointError as error:  # no writable lock place: never keeps a training
            say(f"checkpoint: warning: {error}; going on without the lock that keeps a "
                "second wrapper off this directory")

    def abandon(self) -> None:
        """This wrapper does not own the directory (another one does): leave it alone."""
        self._finished = True
        self.url = None

    def release(self) -> None:
        """Drop the directory's lock (the wrapper's very last step, after the final publish)."""
        if self._owner is not None:
            self._owner.release()
            self._owner = None

    def prepare_launch(self, attempt: int, *, when: str = "") -> dict[str, Any]:
        """Before every launch (in place too) and before the final upload: the local
        directory judged by the upload's layout rules; what the framework would wrongly
        resume from goes to ``.resched-torn/`` (see ``setaside.py``). Returns what moved,
        for the record."""
        when = when or f"before attempt {attempt}"
        if self.local_dir is None or not self.local_dir.is_dir():
            return {}
        from wrapper.checkpoint.setaside import repair_for_resume

        try:
            repair = repair_for_resume(self.local_dir)
        except OSError as error:  # never keeps the training from starting
            say(f"checkpoint: could not check {self.local_dir} {when}: {error}")
            return {}
        for moved in repair.moved:
            say(f"checkpoint: moved {moved.relpath} aside to {repair.torn_set}/ {when}: "
                f"{moved.reason}")
        for written in repair.written:
            say(f"checkpoint: wrote {written.relpath} = {written.value} ({written.reason})")
        if repair.pruned:
            say(f"checkpoint: removed {len(repair.pruned)} older torn set(s) "
                f"({', '.join(repair.pruned)}); the newest are kept")
        if not repair.changed:
            return {}
        fields = {"attempt": attempt, "when": when, **repair.to_dict()}
        emit_event("checkpoint_set_aside", fields)
        return {"checkpoint_set_aside": fields}

    def start_sync(self) -> None:
        if not self.active or not self.sync_every_s or self._store is None:
            return
        from wrapper.checkpoint.syncer import PeriodicSyncer

        assert self.local_dir is not None
        self._syncer = PeriodicSyncer(self.local_dir, self._store, self.sync_every_s)
        self._syncer.start()

    def synced_step(self) -> int | None:
        """The newest step this wrapper restored or published (None: none yet)."""
        steps = [self._synced_step]
        for syncer in (self._syncer, self._oneshot):
            if syncer is not None:
                steps += [result.step for result in list(syncer.results)]
        known = [step for step in steps if step is not None]
        return max(known) if known else None

    def publish_behind(self, step: int | None, *, attempt: int) -> bool:
        """Publish the checkpoint ``attempt`` left (at ``step``) from a background thread
        when it is newer than the store's; True when a round was started. Never blocks:
        a round still running (or the timer's) is left to finish on its own."""
        if not self.active or self._store is None or self._finished or step is None:
            return False
        synced = self.synced_step()
        if synced is not None and step <= synced:
            return False
        if self._behind is not None and self._behind.is_alive():
            return False  # the next one catches up at the timer or the final publish
        syncer = self._syncer or self._one_shot_syncer()
        emit_event("checkpoint_sync_started", {"step": step, "after_attempt": attempt,
                                               "synced_step": synced, "background": True})
        self._behind = threading.Thread(target=self._publish_round, args=(syncer, step),
                                        name="resched-publish-behind", daemon=True)
        self._behind.start()
        return True

    def _one_shot_syncer(self) -> Any:
        if self._oneshot is None:
            from wrapper.checkpoint.syncer import PeriodicSyncer

            assert self.local_dir is not None
            # Never started: only its rounds are used (directory lock, completeness rules).
            self._oneshot = PeriodicSyncer(self.local_dir, self._store, 3600.0)
        return self._oneshot

    def _publish_round(self, syncer: Any, step: int) -> None:
        """Rounds until one publishes: a round that found the directory changing under
        it (the next attempt writing) or locked is retried soon, until ``finish``."""
        started, retry_s = time.monotonic(), _RETRY_FIRST_S
        while True:
            try:
                result = syncer.sync_once()
            except Exception as error:  # noqa: BLE001 - a background round must not kill the wrapper
                say(f"checkpoint: background publish FAILED: {type(error).__name__}: {error}")
                result = None
            why = syncer.last_skip or ""
            if result is not None or not why.startswith(("incomplete", "busy")):
                break
            if self._stop_behind.wait(retry_s):
                break  # the final publish takes over
            retry_s = min(2 * retry_s, _RETRY_MAX_S)
        seconds = round(time.monotonic() - started, 3)
        if result is None:
            emit_event("checkpoint_sync_skipped", {
                "step": step, "why": why or str(syncer.last_error), "seconds": seconds,
                "background": True})
            return
        emit_event("checkpoint_synced", {
            "step": result.step, "checkpoint_id": result.checkpoint_id,
            "uploaded_files": result.uploaded_files, "uploaded_bytes": result.uploaded_bytes,
            "seconds": seconds, "background": True})

    def wait_behind(self, *, stop: bool = False) -> None:
        """Wait for the rounds ``publish_behind`` started; ``stop``: no retry after the
        round under way (the caller publishes next)."""
        if stop:
            self._stop_behind.set()
        if self._behind is not None:
            self._behind.join()
            self._behind = None

    def finish(self) -> None:
        """The final publish before any exit; never raises (the exit code matters more)."""
        if not self._finished:
            # The training has ended: the directory that is uploaded now (by us, or by
            # OSMO's checkpoint: timer after the task) is the one the next pod resumes
            # from, so it is judged like a relaunch (a pointer naming a torn folder would
            # otherwise reach the new pod without the whole folder it should name).
            self.prepare_launch(0, when="before the final upload")
        if not self.active or self._finished:
            self._finished = True
            return
        self._finished = True
        self.wait_behind(stop=True)  # the final publish builds on its upload
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
