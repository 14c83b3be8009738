"""The checkpoint store and the history under many writers at once, on a real S3 server.

Two shapes, both bounded (a fixed number of tasks and rounds, on 127.0.0.1):

- ``many_stores``: T tasks, each with its own checkpoint URL (OSMO gives every task its
  own), publish R rounds at the same time. Each round the task records one attempt in
  its history (the real ``HistoryStore``, inside the checkpoint directory, so the history
  travels with the checkpoint) and publishes. Afterwards every store is restored: the
  newest step and all R attempts must be there (no lost update, nothing corrupt).
- ``one_store``: W processes publish to the SAME URL (a misconfigured job, or a
  restarted task racing its predecessor). The writer lease must serialise them: each
  publish either commits or is refused as busy, every committed checkpoint stays in the
  pointer (retention large enough), and every manifest verifies.

Both count the writes to the hottest key per second (object stores throttle hot keys:
GCS documents about one write per second per object; S3 answers 503 SlowDown).
"""

from __future__ import annotations

import json
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wrapper.checkpoint import CheckpointStore, mark_complete
from wrapper.checkpoint.errors import CheckpointBusyError
from wrapper.checkpoint.layout import read_pointer
from wrapper.checkpoint.marker import STATE_DIR
from wrapper.checkpoint.retry import RetryPolicy
from wrapper.checkpoint.storefs import StoreFS
from wrapper.history import HistoryStore

# blob + manifest + pointer + the lease (written, read back, deleted): writes per commit
WRITES_PER_PUBLISH = 5


@dataclass
class ScaleResult:
    publishes: int = 0
    committed: int = 0
    busy: int = 0
    errors: list[str] = field(default_factory=list)
    lost_updates: int = 0
    corrupt: int = 0
    seconds: float = 0.0
    hottest_key_writes_per_s: float = 0.0  # one store's pointer, the most-written key
    writes_per_s: float = 0.0  # all writes together

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in vars(self).items()}


def _quiet(_: str) -> None:
    pass


def _task(options: dict[str, Any], url: str, workdir: Path, rounds: int,
          stamps: list[float]) -> tuple[int, list[str]]:
    store = CheckpointStore(url, storage_options=options, retention=rounds + 1)
    history = HistoryStore(workdir / STATE_DIR, warn=_quiet)
    done, errors = 0, []
    for step in range(1, rounds + 1):
        (workdir / "model.pt").write_bytes(f"weights of step {step}".encode() * 64)
        mark_complete(workdir, step)
        history.record({"attempt": step, "node": workdir.name, "decision": "retry",
                        "checkpoint_step_before": step - 1, "checkpoint_step_after": step})
        try:
            store.publish(workdir, step)
            stamps.append(time.monotonic())
            done += 1
        except Exception as error:  # noqa: BLE001 - counted and reported, the run goes on
            errors.append(f"{type(error).__name__}: {error}")
    return done, errors


def many_stores(options: dict[str, Any], base_url: str, root: Path, *, tasks: int,
                rounds: int) -> ScaleResult:
    result = ScaleResult(publishes=tasks * rounds)
    stamps: dict[int, list[float]] = {i: [] for i in range(tasks)}
    for i in range(tasks):
        (root / f"task-{i}").mkdir(parents=True)
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=tasks) as pool:
        futures = [pool.submit(_task, options, f"{base_url}/task-{i}", root / f"task-{i}",
                               rounds, stamps[i]) for i in range(tasks)]
        for future in futures:
            done, errors = future.result()
            result.committed += done
            result.errors += errors
    result.seconds = time.monotonic() - start
    for i in range(tasks):
        restored = root / f"restored-{i}"
        store = CheckpointStore(f"{base_url}/task-{i}", storage_options=options)
        got = store.restore(restored)
        history = restored / STATE_DIR / "history.json"
        attempts = json.loads(history.read_text())["attempts"] if history.is_file() else []
        if got is None or got.step != rounds or len(attempts) != rounds:
            result.lost_updates += 1
        if not store.verify().ok:
            result.corrupt += 1
    result.hottest_key_writes_per_s = max(_peak_rate(s) for s in stamps.values())
    result.writes_per_s = WRITES_PER_PUBLISH * result.committed / result.seconds
    return result


def _one_writer(args: tuple[dict[str, Any], str, str, int, int]) -> list[tuple[str, int, float]]:
    options, url, workdir, writer, rounds = args
    store = CheckpointStore(url, storage_options=options, retention=1000)
    folder = Path(workdir)
    outcomes = []
    for round_ in range(rounds):
        step = writer * 1000 + round_
        (folder / "model.pt").write_bytes(f"writer {writer} round {round_}".encode() * 64)
        mark_complete(folder, step)
        try:
            store.publish(folder, step)
            outcomes.append(("committed", step, time.monotonic()))
        except CheckpointBusyError:
            outcomes.append(("busy", step, time.monotonic()))
        except Exception as error:  # noqa: BLE001 - counted and reported
            outcomes.append((f"{type(error).__name__}: {error}", step, time.monotonic()))
    return outcomes


def one_store(options: dict[str, Any], url: str, root: Path, *, writers: int,
              rounds: int) -> ScaleResult:
    result = ScaleResult(publishes=writers * rounds)
    jobs = []
    for writer in range(writers):
        folder = root / f"writer-{writer}"
        folder.mkdir(parents=True)
        jobs.append((options, url, str(folder), writer, rounds))
    start = time.monotonic()
    with multiprocessing.get_context("fork").Pool(writers) as pool:
        outcomes = [o for per_writer in pool.map(_one_writer, jobs) for o in per_writer]
    result.seconds = time.monotonic() - start
    committed = {step for kind, step, _ in outcomes if kind == "committed"}
    result.committed = len(committed)
    result.busy = sum(1 for kind, _, _ in outcomes if kind == "busy")
    result.errors = [kind for kind, _, _ in outcomes if kind not in ("committed", "busy")]
    pointer = read_pointer(StoreFS(url, retry=RetryPolicy(), storage_options=options))
    listed = {ref.step for ref in pointer.checkpoints} if pointer else set()
    result.lost_updates = len(committed - listed)
    result.errors += [f"lost: committed step {s} is not in the pointer {sorted(listed)}; "
                      f"outcomes {sorted(outcomes, key=lambda o: o[2])}"
                      for s in sorted(committed - listed)]
    result.corrupt = 0 if CheckpointStore(url, storage_options=options).verify().ok else 1
    result.hottest_key_writes_per_s = _peak_rate([t for kind, _, t in outcomes if kind == "committed"])
    result.writes_per_s = WRITES_PER_PUBLISH * result.committed / result.seconds
    return result


def _peak_rate(stamps: list[float], window_s: float = 1.0) -> float:
    """The most commits to one key inside any one-second window."""
    ordered = sorted(stamps)
    best, left = 0, 0
    for right, t in enumerate(ordered):
        while t - ordered[left] > window_s:
            left += 1
        best = max(best, right - left + 1)
    return best / window_s
