"""Before every launch: move aside what the framework would wrongly resume from.

The same verdict that guards uploads (:func:`wrapper.checkpoint.layouts.inspect_layout`)
judges the local checkpoint directory before each attempt, the first one and every retry
in place. What it lists as torn (``in_progress``: a ``checkpoint-N/`` without
``trainer_state.json``, a DCP step without ``.metadata``, a ``last.ckpt`` that is cut or
older than a newer step file, a tracker or DeepSpeed ``latest`` naming a torn folder,
NeMo ``-unfinished`` saves) can no longer be "being written": the training has ended. It
is moved (``rename``, never copied, never deleted) into ``.resched-torn/<stamp>/`` beside
a ``resched-torn.json`` that says why, so that the framework resumes from the newest whole
checkpoint. A pointer that was moved because it named a torn folder (Megatron's tracker,
DeepSpeed's ``latest``) is written anew, naming the newest whole folder, so the framework
does not start from scratch; the original is kept in the set.

Housekeeping: the newest :data:`KEEP_TORN_SETS` sets are kept, older ones (resched's own,
named by their stamp) are removed, and we say so. Periodic uploads leave ``.resched-torn/``
out and restores never bring it back (snapshot.py / restore.py), so a torn save is kept
once and never travels with every later checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wrapper.checkpoint.layouts import (
    MEGATRON_TRACKER,
    TORN_DIR,
    Layout,
    LayoutVerdict,
    deepspeed_tag_whole,
    inspect_layout,
    megatron_iteration_whole,
)

KEEP_TORN_SETS = 3
TORN_NOTE = "resched-torn.json"
_SET_NAME = re.compile(r"^\d{8}T\d{6}Z(?:-\d+)?$")
_ITER = re.compile(r"^iter_(\d{7,})$")
_TAG = re.compile(r"^global_step(\d+)$")


@dataclass(frozen=True)
class SetAside:
    relpath: str
    reason: str


@dataclass(frozen=True)
class PointerWritten:
    relpath: str
    value: str
    reason: str


@dataclass(frozen=True)
class Repair:
    """What one pre-launch check did (empty when the directory was consistent)."""

    layout: str
    moved: tuple[SetAside, ...] = ()
    written: tuple[PointerWritten, ...] = ()
    torn_set: str | None = None  # relative path of the set the moves went to
    pruned: tuple[str, ...] = ()  # older sets removed (bounded housekeeping)
    step_before: int | None = None  # what the framework would have resumed from
    step_after: int | None = None  # what it resumes from now

    @property
    def changed(self) -> bool:
        return bool(self.moved or self.written or self.pruned)

    def to_dict(self) -> dict[str, object]:
        return {
            "layout": self.layout, "torn_set": self.torn_set,
            "moved": [{"path": m.relpath, "why": m.reason} for m in self.moved],
            "written": [{"path": w.relpath, "value": w.value, "why": w.reason}
                        for w in self.written],
            "pruned": list(self.pruned), "step_after": self.step_after,
        }


def repair_for_resume(directory: Path, *, now: float | None = None,
                      keep_sets: int = KEEP_TORN_SETS) -> Repair:
    """Judge ``directory`` (the training has ended) and move aside what is torn."""
    directory = Path(directory)
    now = time.time() if now is None else now
    before = inspect_layout(directory)
    movable = _movable(directory, before)
    moved: list[SetAside] = []
    written: list[PointerWritten] = []
    torn_set: Path | None = None
    if movable:
        torn_set = _new_set(directory, now)
        for relpath in movable:
            if _move(directory, relpath, torn_set):
                moved.append(SetAside(relpath, before.why_of(relpath)))
        written = _rewrite_pointers(directory, [m.relpath for m in moved])
        _write_note(torn_set, moved, written, before, now)
    written += _restore_lost_links(directory, inspect_layout(directory) if moved else before)
    pruned = prune_torn_sets(directory, keep_sets)
    after = inspect_layout(directory) if (moved or written) else before
    return Repair(before.layout.value, tuple(moved), tuple(written),
                  torn_set.relative_to(directory).as_posix() if torn_set else None,
                  pruned, before.step if before.complete else None,
                  after.step if after.complete else None)


def _movable(directory: Path, verdict: LayoutVerdict) -> list[str]:
    if verdict.complete is None or not verdict.in_progress:
        return []
    if verdict.layout is Layout.DCP and (os.path.lexists(directory / ".metadata") or any(
            name.endswith(".distcp") for name in _listdir(directory))):
        return []  # the directory itself is the one DCP checkpoint: nothing to fall back to
    return [p for p in verdict.in_progress
            if p and not p.startswith((".", "/")) and ".." not in p.split("/")
            and os.path.lexists(directory / p)]


def _new_set(directory: Path, now: float) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    root = directory / TORN_DIR
    root.mkdir(exist_ok=True)
    for n in range(1000):
        candidate = root / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise OSError(f"cannot create a new set under {root}")


def _move(directory: Path, relpath: str, torn_set: Path) -> bool:
    source = directory / relpath
    target = torn_set / relpath
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(source, target)  # the link itself, never what it points to
    except FileNotFoundError:
        return False
    return True


def _rewrite_pointers(directory: Path, moved: list[str]) -> list[PointerWritten]:
    """A tracker / ``latest`` that went aside with its torn folder names the newest whole
    folder instead (without it Megatron and DeepSpeed start from scratch)."""
    written: list[PointerWritten] = []
    for relpath in moved:
        parent, _, name = relpath.rpartition("/")
        base = directory / parent if parent else directory
        if name == MEGATRON_TRACKER:
            best = _newest_whole(base, _ITER, megatron_iteration_whole, lambda n: f"iter_{n:07d}")
            value = str(best) if best is not None else None
        elif name == "latest":
            best = _newest_whole(base, _TAG, deepspeed_tag_whole, lambda n: f"global_step{n}")
            value = f"global_step{best}" if best is not None else None
        else:
            continue
        if value is None or os.path.lexists(base / name):
            continue
        fd = os.open(base / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(value)
            handle.flush()
            os.fsync(handle.fileno())
        written.append(PointerWritten(relpath, value, f"the original went aside with the "
                                      f"torn folder it named; {value} is the newest whole one"))
    return written


def _restore_lost_links(directory: Path, verdict: LayoutVerdict) -> list[PointerWritten]:
    """Lightning's save_last="link" lost its link mid-save: link the newest whole step
    file, as ModelCheckpoint was about to (without it fit("last") starts from 0)."""
    written = []
    for link, target in verdict.lost_links:
        path = directory / link
        if os.path.lexists(path) or not (path.parent / target).is_file():
            continue
        os.symlink(target, path)  # relative, beside it, as Lightning makes it
        written.append(PointerWritten(link, target, "save_last=\"link\" removed it and the "
                                      "save died before linking again; the newest whole step "
                                      "file is what it was about to name"))
    return written


def _newest_whole(base: Path, pattern: re.Pattern[str], whole: Callable[[Path], bool],
                  folder_name: Callable[[int], str]) -> int | None:
    numbers = sorted((int(m.group(1)) for name in _listdir(base)
                      if (m := pattern.match(name))), reverse=True)
    return next((n for n in numbers if _is_dir(base / folder_name(n))
                 and whole(base / folder_name(n))), None)


def _write_note(torn_set: Path, moved: list[SetAside], written: list[PointerWritten],
                before: LayoutVerdict, now: float) -> None:
    note = {"time": now, "layout": before.layout.value, "verdict": before.reason,
            "moved": [{"path": m.relpath, "why": m.reason} for m in moved],
            "pointers_written": [{"path": w.relpath, "value": w.value} for w in written]}
    (torn_set / TORN_NOTE).write_text(json.dumps(note, indent=2, sort_keys=True) + "\n")


def torn_sets(directory: Path) -> list[str]:
    """resched's torn sets under ``<directory>/.resched-torn/``, oldest first."""
    root = Path(directory) / TORN_DIR
    return sorted(name for name in _listdir(root)
                  if _SET_NAME.match(name) and _is_dir(root / name))


def prune_torn_sets(directory: Path, keep: int = KEEP_TORN_SETS) -> tuple[str, ...]:
    """Remove all but the newest ``keep`` sets (only sets named by resched's stamp)."""
    sets = torn_sets(directory)
    old = sets[: max(0, len(sets) - keep)]
    root = Path(directory) / TORN_DIR
    for name in old:
        shutil.rmtree(root / name)  # rmtree never follows links inside the set
    return tuple(f"{TORN_DIR}/{name}" for name in old)


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
