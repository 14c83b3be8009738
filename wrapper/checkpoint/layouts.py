"""The checkpoint layouts real trainings write, and what each says about completeness.

A training that does not call :func:`wrapper.checkpoint.marker.mark_complete` still
tells, through its own files, which checkpoint it would resume from and which one is
still being written. :func:`inspect_layout` reads those files (never writes, never
follows a link) and returns a :class:`LayoutVerdict`:

- ``complete``: True when the directory holds a checkpoint the framework would resume
  from, False when a known layout shows nothing whole yet, None when no known layout
  applies (or its files cannot be read): the caller then falls back to "unchanged across
  the upload";
- ``step``: the step / iteration that resume would start from (progress for the wrapper);
- ``in_progress``: relative paths (files or folders) of checkpoints being written or torn.
  While the training runs they are left out of an upload; after it ended they are
  uploaded under ``.resched-torn/`` so that nothing is lost and no framework resumes
  from them after a restore.

Rules and their sources (see docs/checkpoint.md, "Framework layouts"):

MEGATRON  Megatron-LM / Megatron-Core / Megatron-Bridge (checkpointing.py): folders
          ``iter_{N:07d}/``; ``latest_checkpointed_iteration.txt`` holds N (or
          ``release``) and is written by rank 0 only after every rank finished N (with
          ``--async-save`` in the finalize step, later). Resume reads the tracker only,
          so a newer ``iter_M/`` is not what training resumes from. A tracker that is
          not a number makes Megatron exit: we say so in one line and fall back. The
          global non-persistent checkpoints live under ``non_persistent/`` with their own
          tracker; local non-persistent ones live on node-local disk, outside the upload.
DCP       torch.distributed.checkpoint FileSystemWriter: ``__<rank>_<n>.distcp`` per
          rank, ``.metadata`` written last by the coordinator (finish()). No
          ``.metadata``, or one older than a ``.distcp`` beside it (a second save into
          the same folder under way): not complete. Numbered folders of DCP saves
          (``step-N``, ``step_N``, ``iter_N``, ``epoch_N``...) are each judged so.
HF        Hugging Face Trainer (_save_checkpoint): ``checkpoint-<global_step>/``;
          ``trainer_state.json`` is written near the end of the save: without it (or
          unreadable JSON), the folder is incomplete.
LIGHTNING PyTorch Lightning / NeMo 1 ModelCheckpoint: ``*.ckpt`` files written by
          torch.save (a zip archive since torch 1.6: a truncated one lacks its end
          record) or folders (distributed: DCP rule on the folder or its ``weights/``);
          NeMo writes ``<name without .ckpt>-unfinished`` while a save runs and removes
          it after: such a checkpoint is in progress. The step comes from ``step=N``.
"""

from __future__ import annotations

import json
import os
import re
import stat
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
TORN_DIR = ".resched-torn"  # where a final upload puts saves that never finished (user bytes)
_ITER = re.compile(r"^iter_(\d{7,})$")
_HF = re.compile(r"^checkpoint-(\d+)$")
_NUMBERED = re.compile(r"^(?:step|iter|epoch|global_step|checkpoint|ckpt)[-_=]?(\d+)$")
_STEP_IN_NAME = re.compile(r"(?:^|[-_])step=(\d+)")
_UNFINISHED = "-unfinished"
_MAX_DEPTH = 3  # how deep *.ckpt files are looked for (lightning_logs/version_0/checkpoints)
_MAX_TRACKER_BYTES = 4096


class Layout(str, Enum):
    MEGATRON = "megatron"
    DCP = "torch-dcp"
    HF = "hf-trainer"
    LIGHTNING = "lightning"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class LayoutVerdict:
    layout: Layout
    complete: bool | None
    step: int | None
    reason: str
    in_progress: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())


UNKNOWN = LayoutVerdict(Layout.UNKNOWN, None, None, "no known framework layout")


def inspect_layout(directory: str | Path) -> LayoutVerdict:
    """What the framework files in ``directory`` say (see the module docstring)."""
    folder = Path(directory)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return UNKNOWN
    for reader in (_megatron, _hf, _lightning, _dcp):
        verdict = reader(folder, names)
        if verdict is not None:
            return verdict
    return UNKNOWN


def layout_step(directory: str | Path) -> int | None:
    """The step a framework would resume from in ``directory`` (None: none / unknown)."""
    verdict = inspect_layout(directory)
    return verdict.step if verdict.complete else None


# --- Megatron ---------------------------------------------------------------------------

def _megatron(folder: Path, names: list[str]) -> LayoutVerdict | None:
    iters = _numbered(folder, names, _ITER)
    if MEGATRON_TRACKER not in names and not iters:
        return None
    verdict = _megatron_root(folder, names, iters, prefix="")
    if "non_persistent" in names and _is_dir(folder / "non_persistent"):
        sub_names = _listdir(folder / "non_persistent")
        sub = _megatron_root(folder / "non_persistent", sub_names,
                             _numbered(folder / "non_persistent", sub_names, _ITER),
                             prefix="non_persistent/")
        # Megatron resumes from the newer of the persistent and the global non-persistent
        # checkpoint; each side's unfinished iterations stay out of a running upload.
        newer = sub.complete and (not verdict.complete or (sub.step or -1) > (verdict.step or -1))
        verdict = LayoutVerdict(
            Layout.MEGATRON,
            verdict.complete if not newer else True,
            sub.step if newer else verdict.step,
            sub.reason if newer else verdict.reason,
            verdict.in_progress + sub.in_progress,
            verdict.warnings + sub.warnings,
        )
    return verdict


def _megatron_root(folder: Path, names: list[str], iters: dict[int, str], *, prefix: str
                   ) -> LayoutVerdict:
    tracker = folder / MEGATRON_TRACKER
    where = f"{prefix}{MEGATRON_TRACKER}"
    if MEGATRON_TRACKER not in names:
        return LayoutVerdict(Layout.MEGATRON, False if iters else None, None,
                             f"{len(iters)} iter_* folder(s) but no {where} yet: no iteration "
                             "finished", tuple(prefix + n for n in iters.values()))
    text = _read_small(tracker)
    if text is None:
        return LayoutVerdict(Layout.MEGATRON, None, None, f"{where} cannot be read",
                             warnings=(f"{where} cannot be read (not a regular file, or "
                                       "too large); treating the folder as an unknown layout",))
    value = text.strip()
    if not value:  # Megatron opens it with "w" then writes: empty is a write under way
        return LayoutVerdict(Layout.MEGATRON, False, None, f"{where} is empty (being written)",
                             tuple(prefix + n for n in iters.values()))
    if value == "release":
        whole = _is_dir(folder / "release") and _checkpoint_dir_complete(folder / "release")
        return LayoutVerdict(Layout.MEGATRON, whole, 0 if whole else None,
                             f"{where} says release" + ("" if whole else
                                                         " but release/ is not whole"))
    if not value.isdigit():
        shown = value[:40].encode("unicode_escape").decode()
        return LayoutVerdict(Layout.MEGATRON, None, None, f"{where} is not a number",
                             warnings=(f"{folder / MEGATRON_TRACKER}: holds {shown!r}, not an "
                                       "iteration number (Megatron writes the number or "
                                       "'release'); checkpoints there are uploaded only when "
                                       "the folder stays unchanged across an upload; fix: "
                                       "write the last complete iteration into it",))
    iteration = int(value)
    newer = tuple(prefix + name for number, name in iters.items() if number > iteration)
    name = f"iter_{iteration:07d}"
    path = folder / name
    if not _is_dir(path) or not _checkpoint_dir_complete(path):
        return LayoutVerdict(Layout.MEGATRON, False, None,
                             f"{where} names iteration {iteration} but {prefix}{name}/ is "
                             "missing or not whole", newer + ((prefix + name,) if
                                                              _is_dir(path) else ()))
    return LayoutVerdict(Layout.MEGATRON, True, iteration,
                         f"{where} names iteration {iteration}, {prefix}{name}/ is whole", newer)


def _checkpoint_dir_complete(path: Path) -> bool:
    """A Megatron iteration folder: torch_dist (DCP rule) or legacy mp_rank_*/ files."""
    names = _listdir(path)
    if any(n.endswith(".distcp") for n in names) or ".metadata" in names:
        return _dcp_complete(path, names)
    ranks = [n for n in names if n.startswith("mp_rank_") and _is_dir(path / n)]
    if ranks:
        return all(any(f.endswith(".pt") for f in _listdir(path / r)) for r in ranks)
    return any(_is_file(path / n) for n in names)  # e.g. a single model_optim_rng.pt


# --- torch.distributed.checkpoint -------------------------------------------------------

def _dcp(folder: Path, names: list[str]) -> LayoutVerdict | None:
    if ".metadata" in names or any(n.endswith(".distcp") for n in names):
        whole = _dcp_complete(folder, names)
        return LayoutVerdict(Layout.DCP, whole, None,
                             ".metadata written last is present" if whole else
                             "no .metadata (or one older than a .distcp): a save is under way",
                             () if whole else tuple(names))
    numbered = {n: name for n, name in _numbered(folder, names, _NUMBERED).items()
                if _looks_dcp(folder / name)}
    if not numbered:
        return None
    complete = [n for n, name in numbered.items() if _dcp_complete(folder / name)]
    best = max(complete) if complete else None
    torn = tuple(name for n, name in numbered.items() if n not in complete)
    return LayoutVerdict(Layout.DCP, best is not None, best,
                         f"newest whole DCP save: {numbered[best]}" if best is not None else
                         "no numbered DCP folder has its .metadata yet", torn)


def _looks_dcp(path: Path) -> bool:
    names = _listdir(path)
    return ".metadata" in names or any(n.endswith(".distcp") for n in names)


def _dcp_complete(path: Path, names: list[str] | None = None) -> bool:
    names = _listdir(path) if names is None else names
    # Presence only, not times: a restored or copied checkpoint has new mtimes in any order.
    # A second save into the same folder is caught by "unchanged across the upload".
    meta = _stat(path / ".metadata")
    return meta is not None and stat.S_ISREG(meta.st_mode) and meta.st_size > 0


# --- Hugging Face Trainer ---------------------------------------------------------------

def _hf(folder: Path, names: list[str]) -> LayoutVerdict | None:
    found = _numbered(folder, names, _HF)
    if not found:
        return None
    complete: dict[int, int] = {}
    for number, name in found.items():
        step = _trainer_state_step(folder / name / "trainer_state.json")
        if step is not None:
            complete[number] = step if step >= 0 else number
    torn = tuple(name for number, name in found.items() if number not in complete)
    if not complete:
        return LayoutVerdict(Layout.HF, False, None,
                             "no checkpoint-N/ has its trainer_state.json yet", torn)
    best = max(complete)
    return LayoutVerdict(Layout.HF, True, complete[best],
                         f"checkpoint-{best}/trainer_state.json is present", torn)


def _trainer_state_step(path: Path) -> int | None:
    text = _read_small(path, limit=64 * 1024 * 1024)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None  # written near the end of the save; unreadable: the save was cut
    step = data.get("global_step") if isinstance(data, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else -1


# --- Lightning / NeMo -------------------------------------------------------------------

def _lightning(folder: Path, names: list[str]) -> LayoutVerdict | None:
    found = list(_ckpt_paths(folder, "", names, depth=0))
    if not found:
        return None
    unfinished = {rel[: -len(_UNFINISHED)] for rel, _ in _walk_names(folder, _MAX_DEPTH)
                  if rel.endswith(_UNFINISHED)}
    complete: list[tuple[int, str]] = []
    torn: list[str] = []
    for rel in found:
        base = rel[: -len(".ckpt")]
        if base in unfinished or not _ckpt_complete(folder / rel):
            torn.append(rel)
            if base in unfinished:
                torn.append(base + _UNFINISHED)
            continue
        match = _STEP_IN_NAME.search(Path(base).name)
        complete.append((int(match.group(1)) if match else -1, rel))
    if not complete:
        return LayoutVerdict(Layout.LIGHTNING, False, None,
                             f"{len(found)} .ckpt, none whole yet", tuple(torn))
    step, rel = max(complete)
    return LayoutVerdict(Layout.LIGHTNING, True, step if step >= 0 else None,
                         f"{rel} is whole", tuple(torn))


def _ckpt_paths(folder: Path, prefix: str, names: Iterable[str], *, depth: int
                ) -> Iterable[str]:
    for name in names:
        path = folder / name
        if name.endswith(".ckpt"):
            if _is_file(path) or _is_dir(path):
                yield prefix + name
        elif depth < _MAX_DEPTH and _is_dir(path) and not name.startswith("."):
            yield from _ckpt_paths(path, f"{prefix}{name}/", sorted(_listdir(path)),
                                   depth=depth + 1)


def _ckpt_complete(path: Path) -> bool:
    if _is_dir(path):  # a distributed checkpoint (NeMo 2: weights/ holds the DCP files)
        inner = path / "weights" if _is_dir(path / "weights") else path
        return _dcp_complete(inner)
    try:
        return zipfile.is_zipfile(path)  # torch.save's zip: the end record comes last
    except OSError:
        return False


def _walk_names(folder: Path, depth: int, prefix: str = "") -> Iterable[tuple[str, Path]]:
    for name in sorted(_listdir(folder)):
        path = folder / name
        yield prefix + name, path
        if depth > 0 and _is_dir(path) and not name.startswith("."):
            yield from _walk_names(path, depth - 1, f"{prefix}{name}/")


# --- small safe file helpers (lstat: a link is never followed) ---------------------------

def _numbered(folder: Path, names: Iterable[str], pattern: re.Pattern[str]) -> dict[int, str]:
    found: dict[int, str] = {}
    for name in names:
        match = pattern.match(name)
        if match and _is_dir(folder / name):
            found[int(match.group(1))] = name
    return dict(sorted(found.items()))


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _is_dir(path: Path) -> bool:
    st = _stat(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def _is_file(path: Path) -> bool:
    st = _stat(path)
    return st is not None and stat.S_ISREG(st.st_mode)


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _read_small(path: Path, limit: int = _MAX_TRACKER_BYTES) -> str | None:
    st = _stat(path)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        return None
    try:
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None
