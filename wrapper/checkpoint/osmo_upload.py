"""One upload of a task's ``checkpoint:`` entry as OSMO's runtime does it, for any task.

Shared by the local executor and the Slurm job side, so both upload the same things:
whatever the task writes (resched's marker, a framework layout, or plain files), only a
complete state while the task runs (``snapshot.prepare_snapshot``), and after the task
ended what is there. OSMO retries a failed upload up to 5 times; a state that is being
written is not a failure: the round is skipped (the timer tries again one period later).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from wrapper.checkpoint.errors import CheckpointBusyError, SnapshotUnstableError
from wrapper.checkpoint.results import PublishResult

UPLOAD_ATTEMPTS = 5  # OSMO retries a failed checkpoint upload up to 5 times


class UploadKind(str, Enum):
    UPLOADED = "uploaded"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass(frozen=True)
class UploadOutcome:
    kind: UploadKind
    reason: str = ""
    result: PublishResult | None = None
    seconds: float = 0.0


def upload_checkpoint(local_dir: Path, url: str, *, final: bool, regex: str | None = None,
                      attempts: int = UPLOAD_ATTEMPTS,
                      sleep: Callable[[float], object] = time.sleep,
                      clock: Callable[[], float] = time.monotonic) -> UploadOutcome:
    """Publish ``local_dir`` to ``url`` (a resched store) once; never raises."""
    from wrapper.checkpoint.store import CheckpointStore

    local_dir = Path(local_dir)
    started = clock()
    if not local_dir.is_dir():
        return UploadOutcome(UploadKind.SKIPPED, f"{local_dir} does not exist (nothing to upload)")
    error = ""
    for attempt in range(attempts):
        started = clock()
        try:
            result = CheckpointStore(url).publish(local_dir, final=final, regex=regex,
                                                  layouts=True)
        except SnapshotUnstableError as why:
            if final and attempt + 1 < attempts and "changed while" in str(why):
                sleep(0.2)  # a straggler process still writing: let it settle, try again
                continue
            return UploadOutcome(UploadKind.SKIPPED, f"incomplete: {why}")
        except CheckpointBusyError as busy:
            error = str(busy)
            sleep(0.5)  # another uploader of the same store (e.g. the wrapper) is at it
            continue
        except Exception as exc:  # noqa: BLE001 - OSMO retries any upload failure
            error = f"{type(exc).__name__}: {exc}"
            sleep(0.2 * (attempt + 1))
            continue
        return UploadOutcome(UploadKind.UPLOADED, result=result, seconds=clock() - started)
    return UploadOutcome(UploadKind.FAILED, error or "upload failed")
