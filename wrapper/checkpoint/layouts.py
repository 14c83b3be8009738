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
          so a newer ``iter_M/`` is not what training resumes from. An ``iter_N/`` in
          the torch_dist format (``common.pt``) is whole with its ``.metadata`` and, written
          last by ``dist_checkpointing.save``, a readable ``metadata.json`` (without it
          ``dist_checkpointing.load`` refuses the folder); torch_dcp: the DCP rule. A tracker that is
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
from collections.abc import Callable, Iterable
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
_LAST = "last"  # ModelCheckpoint.CHECKPOINT_NAME_LAST: last.ckpt, last-v1.ckpt
_MAX_DEPTH = 3  # how deep *.ckpt files are looked for (lightning_logs/version_0/checkpoints)
_MAX_TRACKER_BYTES = 4096


class Layout(str, Enum):
    MEGATRON = "megatron"
    DCP = "torch-dcp"
    HF = "hf-trainer"
    DEEPSPEED = "deepspeed"
    LIGHTNING = "lightning"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class PinnedFile:
    """A small file the framework rewrites in place at every save, with the exact bytes
    this verdict read and judged: a pointer naming the checkpoint resume loads (Megatron's
    tracker, DeepSpeed's ``latest``), or a helper copied anew by every save (DeepSpeed's
    ``zero_to_fp32.py``). An upload sends these bytes, never the live file: the next
    save's rewrite is not a change to the checkpoint judged (docs/checkpoint.md)."""

    path: str  # relative to the checkpoint directory
    raw: bytes
    names: str | None  # the folder (relative path) a pointer's bytes name, judged whole


@dataclass(frozen=True)
class LayoutVerdict:
    layout: Layout
    complete: bool | None
    step: int | None
    reason: str
    in_progress: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())
    # (relative path in ``in_progress``, why): what a relaunch says when it moves it aside
    why: tuple[tuple[str, str], ...] = field(default=())
    # (link path, target beside it): a pointer the framework lost mid-save and the
    # relaunch puts back (Lightning's save_last="link" removes last.ckpt, then links)
    lost_links: tuple[tuple[str, str], ...] = field(default=())
    # the files of a complete verdict the framework rewrites at every save, bytes as judged
    pinned: tuple[PinnedFile, ...] = field(default=())

    def why_of(self, relpath: str) -> str:
        return next((why for path, why in self.why if path == relpath), self.reason)


UNKNOWN = LayoutVerdict(Layout.UNKNOWN, None, None, "no known framework layout")


def inspect_layout(directory: str | Path) -> LayoutVerdict:
    """What the framework files in ``directory`` say (see the module docstring)."""
    folder = Path(directory)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return UNKNOWN
    for reader in (_megatron, _hf, _deepspeed, _lightning, _dcp):
        verdict = reader(folder, names)
        if verdict is not None:
            return verdict
    return UNKNOWN


def megatron_iteration_whole(path: Path) -> bool:
    """An ``iter_N/`` folder by the rule the tracker check uses."""
    return _checkpoint_dir_complete(Path(path))


def deepspeed_tag_whole(path: Path) -> bool:
    """A DeepSpeed ``<tag>/`` folder: every rank's .pt a whole archive."""
    return _deepspeed_tag_whole(Path(path))


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
            pinned=verdict.pinned + sub.pinned,
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
    raw = _read_small_bytes(tracker)
    if raw is None:
        return LayoutVerdict(Layout.MEGATRON, None, None, f"{where} cannot be read",
                             warnings=(f"{where} cannot be read (not a regular file, or "
                                       "too large); treating the folder as an unknown layout",))
    value = _text(raw).strip()
    if not value:  # Megatron opens it with "w" then writes: empty is a write under way
        # (for good once the training ended: Megatron fails on an empty tracker)
        why = f"{where} is empty: Megatron fails reading it (invalid literal for int())"
        return LayoutVerdict(Layout.MEGATRON, False, None, f"{where} is empty (being written)",
                             tuple(prefix + n for n in iters.values()) + (where,),
                             why=((where, why),))
    if value == "release":
        whole = _is_dir(folder / "release") and _checkpoint_dir_complete(folder / "release")
        return LayoutVerdict(Layout.MEGATRON, whole, 0 if whole else None,
                             f"{where} says release" + ("" if whole else
                                                         " but release/ is not whole"),
                             pinned=(PinnedFile(where, raw, f"{prefix}release"),)
                             if whole else ())
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
        # The tracker goes with the torn folder: a tracker naming a folder the upload (or
        # the directory a relaunch resumes from) does not hold makes Megatron fail.
        why = (f"{where} names iteration {iteration} but {prefix}{name}/ is missing or not "
               "whole: Megatron would load it and fail")
        torn = (prefix + name,) if _is_dir(path) else ()
        return LayoutVerdict(Layout.MEGATRON, False, None,
                             f"{where} names iteration {iteration} but {prefix}{name}/ is "
                             "missing or not whole", newer + torn + (where,),
                             why=tuple((p, why) for p in torn + (where,)))
    return LayoutVerdict(Layout.MEGATRON, True, iteration,
                         f"{where} names iteration {iteration}, {prefix}{name}/ is whole", newer,
                         pinned=(PinnedFile(where, raw, prefix + name),))


def _checkpoint_dir_complete(path: Path) -> bool:
    """A Megatron iteration folder: torch_dist (dist_checkpointing), torch_dcp (DCP rule)
    or legacy mp_rank_*/ files."""
    names = _listdir(path)
    if _DIST_CKPT_COMMON in names or _DIST_CKPT_CONFIG in names:
        return _dist_checkpointing_complete(path, names)
    if any(n.endswith(".distcp") for n in names) or ".metadata" in names:
        return _dcp_complete(path, names)
    ranks = [n for n in names if n.startswith("mp_rank_") and _is_dir(path / n)]
    if ranks:
        return all(any(f.endswith(".pt") for f in _listdir(path / r)) for r in ranks)
    return any(_is_file(path / n) for n in names)  # e.g. a single model_optim_rng.pt


# megatron.core.dist_checkpointing.save (serialization.py, megatron-core 0.16): rank 0
# writes common.pt first (save_common), the ranks their .distcp, the coordinator .metadata
# (.metadata.tmp, renamed), and last, in metadata_finalize_fn, rank 0 writes metadata.json
# (core.save_config). load() refuses a folder without a readable metadata.json
# (validation.verify_checkpoint_and_load_strategy -> core.maybe_load_config: "is not a
# distributed checkpoint"), so a torch_dist folder is whole only with both.
_DIST_CKPT_COMMON = "common.pt"
_DIST_CKPT_CONFIG = "metadata.json"


def _dist_checkpointing_complete(path: Path, names: list[str]) -> bool:
    if not _dcp_complete(path, names):
        return False
    text = _read_small(path / _DIST_CKPT_CONFIG, limit=64 * 1024)
    try:
        config = json.loads(text) if text is not None else None
    except ValueError:
        return False
    return isinstance(config, dict)


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
                         "no numbered DCP folder has its .metadata yet", torn,
                         why=tuple((name, f"{name}/ has no .metadata (written last by the "
                                          "coordinator): the save was cut") for name in torn))


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
    why = tuple((name, f"{name}/ has no readable trainer_state.json (the save was cut): "
                       "get_last_checkpoint would pick the newest checkpoint-N/ and fail")
                for name in torn)
    if not complete:
        return LayoutVerdict(Layout.HF, False, None,
                             "no checkpoint-N/ has its trainer_state.json yet", torn, why=why)
    best = max(complete)
    return LayoutVerdict(Layout.HF, True, complete[best],
                         f"checkpoint-{best}/trainer_state.json is present", torn, why=why)


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


# --- DeepSpeed ---------------------------------------------------------------------------

def _deepspeed(folder: Path, names: list[str]) -> LayoutVerdict | None:
    """``latest`` names the tag ``load_checkpoint()`` loads; ``<tag>/`` holds
    ``*_model_states.pt`` and, with ZeRO >= 1, one ``*_optim_states.pt`` per data-parallel
    rank (engine.py ``_save_checkpoint`` / ``_save_zero_checkpoint``). Rank 0 writes
    ``latest`` without waiting for the other ranks, so ``latest`` can name a torn tag."""
    tags = [n for n in names if _is_dir(folder / n) and _is_deepspeed_tag(folder / n)]
    has_latest = _DS_LATEST in names and _is_file(folder / _DS_LATEST)
    if not tags or (_DS_LATEST in names and not has_latest):
        return None
    torn = [tag for tag in tags if not _deepspeed_tag_whole(folder / tag)]
    why = [(tag, f"{tag}/: not every rank's .pt is a whole archive (the save was cut)")
           for tag in torn]
    if not has_latest:
        return LayoutVerdict(Layout.DEEPSPEED, False, None, f"{len(tags)} DeepSpeed tag "
                             f"folder(s) but no {_DS_LATEST} file: load_checkpoint() loads "
                             "nothing", tuple(torn), why=tuple(why))
    raw = _read_small_bytes(folder / _DS_LATEST) or b""
    tag = _text(raw).strip()
    if not tag or tag not in tags or tag in torn:
        problem = (f"{_DS_LATEST} names {tag!r}, which is missing or not whole: "
                   "load_checkpoint() would load it and fail")
        return LayoutVerdict(Layout.DEEPSPEED, False, None, problem,
                             tuple(torn) + (_DS_LATEST,), why=tuple(why) + ((_DS_LATEST, problem),))
    step = _deepspeed_step(folder / tag)
    return LayoutVerdict(Layout.DEEPSPEED, True, step, f"{_DS_LATEST} names {tag}/, which is whole",
                         tuple(torn), why=tuple(why),
                         pinned=(PinnedFile(_DS_LATEST, raw, tag),)
                         + _deepspeed_helpers(folder, names))


_DS_LATEST = "latest"
# engine.py _copy_recovery_script: rank 0 copies these into the save dir at every save
# (shutil.copyfile: truncated, then written), always the same bytes of the installed
# DeepSpeed; load_checkpoint() never reads them.
_DS_HELPERS = ("zero_to_fp32.py", "zero_to_torch.py")
_MAX_HELPER_BYTES = 1024 * 1024


def _deepspeed_helpers(folder: Path, names: list[str]) -> tuple[PinnedFile, ...]:
    """The recovery scripts there, as read now (an empty one is a copy under way: not
    pinned, so a change to it still refuses the upload)."""
    found = []
    for name in _DS_HELPERS:
        raw = _read_small_bytes(folder / name, _MAX_HELPER_BYTES) if name in names else None
        if raw:
            found.append(PinnedFile(name, raw, None))
    return tuple(found)


_DS_TAG_STEP = re.compile(r"(\d+)$")


def _is_deepspeed_tag(path: Path) -> bool:
    return any(n.endswith("_model_states.pt") for n in _listdir(path))


def _deepspeed_tag_whole(path: Path) -> bool:
    names = _listdir(path)
    files = [n for n in names if n.endswith(".pt")]
    if not files or not all(_is_file(path / n) and _ckpt_complete(path / n) for n in files):
        return False
    model = sorted(n for n in files if n.startswith("mp_rank_") and n.endswith("_model_states.pt"))
    if not model:
        return True  # ZeRO-3 names: every file present is whole; the count is not known
    data = _peek_dict_cached(path / model[0])
    if data is None:
        return True
    config = data.get("ds_config")
    zero = config.get("zero_optimization") if isinstance(config, dict) else None
    stage = zero.get("stage", 0) if isinstance(zero, dict) else 0
    dp, mp = data.get("dp_world_size"), data.get("mp_world_size")
    if not (isinstance(stage, int) and stage >= 1 and isinstance(dp, int) and isinstance(mp, int)):
        return True
    optim = [n for n in files if n.endswith("_optim_states.pt") and "zero_pp_rank_" in n]
    return len(optim) >= dp * mp  # a rank that died before opening its file left none


def _deepspeed_step(path: Path) -> int | None:
    model = sorted(n for n in _listdir(path) if n.endswith("_model_states.pt"))
    data = _peek_dict_cached(path / model[0]) if model else None
    steps = None if data is None else data.get("global_steps")
    if isinstance(steps, int) and not isinstance(steps, bool):
        return steps
    match = _DS_TAG_STEP.search(path.name)
    return int(match.group(1)) if match else None


def _peek_dict(path: Path, part: str,
                 pick: Callable[[dict[str, object]], dict[str, object] | None]
                 ) -> dict[str, object] | None:
    """``pick`` of a ``torch.save`` file's top-level dict, read once per file version
    (the same file is judged at every upload); ``part`` names what was picked."""
    st = _stat(path)
    if st is None:
        return None
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, part)
    if key not in _DICT_PEEKS:
        from wrapper.checkpoint.ptpeek import peek_top_level

        if len(_DICT_PEEKS) > 128:
            _DICT_PEEKS.clear()
        data = peek_top_level(path)
        _DICT_PEEKS[key] = None if data is None else pick(data)
    return _DICT_PEEKS[key]


_DICT_PEEKS: dict[tuple[str, int, int, int, str], dict[str, object] | None] = {}


def _peek_dict_cached(path: Path) -> dict[str, object] | None:
    """DeepSpeed's model states: only the small plain values (the rest can be large)."""
    return _peek_dict(path, "deepspeed", lambda data: {
        k: v for k, v in data.items()
        if k in ("global_steps", "dp_world_size", "mp_world_size", "ds_config")})


# --- Lightning / NeMo -------------------------------------------------------------------

def _lightning(folder: Path, names: list[str]) -> LayoutVerdict | None:
    found = list(_ckpt_paths(folder, "", names, depth=0))
    if not found:
        return None
    unfinished = {rel[: -len(_UNFINISHED)] for rel, _ in _walk_names(folder, _MAX_DEPTH)
                  if rel.endswith(_UNFINISHED)}
    by_dir: dict[str, list[str]] = {}
    for rel in found:
        by_dir.setdefault(rel.rpartition("/")[0], []).append(rel)
    best: tuple[int, str] | None = None
    torn: list[str] = []
    why: list[tuple[str, str]] = []
    lost: list[tuple[str, str]] = []
    for rels in by_dir.values():
        target, dir_torn = _lightning_dir(folder, rels, unfinished)
        torn += [rel for rel, _ in dir_torn]
        why += dir_torn
        link = _lost_last_link(folder, rels, target, unfinished)
        if link is not None:
            lost.append(link)
        elif target is not None and (best is None or target > best):
            best = target
    if best is None:
        return LayoutVerdict(Layout.LIGHTNING, False, None,
                             f"{len(found)} .ckpt, none that resume would load is whole" + (
                                 f" ({lost[0][0]} is missing: fit(ckpt_path=\"last\") would "
                                 "start from step 0)" if lost else ""),
                             tuple(torn), why=tuple(why), lost_links=tuple(lost))
    step, rel = best
    return LayoutVerdict(Layout.LIGHTNING, True, step if step >= 0 else None,
                         f"{rel} is whole" + (f" and holds step {step}" if step >= 0 else ""),
                         tuple(torn), why=tuple(why))


def _lightning_dir(folder: Path, rels: list[str], unfinished: set[str]
                   ) -> tuple[tuple[int, str] | None, list[tuple[str, str]]]:
    """One ModelCheckpoint folder: (step, file) resume would load, and what is torn.

    With ``last*.ckpt`` there (``save_last``), ``fit(ckpt_path="last")`` loads the newest
    of them by mtime and nothing else (connectors/checkpoint_connector.py): a torn one is
    what it would wrongly load, and a step file newer than the step it holds is a save
    that did not reach ``last.ckpt`` (ModelCheckpoint writes the top-k file first). Without
    any ``last*.ckpt`` the newest whole step file is taken (an explicit ckpt_path)."""
    torn: list[tuple[str, str]] = []
    whole: list[tuple[int, str]] = []
    lasts: list[tuple[int, str]] = []  # (mtime_ns, rel)
    for rel in rels:
        base = rel[: -len(".ckpt")]
        path = folder / rel
        if base in unfinished:
            why = f"{rel}: NeMo's {Path(base).name}{_UNFINISHED} marker says its save never finished"
            torn += [(rel, why), (base + _UNFINISHED, why)]
            continue
        if _is_link(path) and not Path(rel).name.startswith(_LAST):
            continue  # a link that resume does not pick by name: neither torn nor whole
        if Path(rel).name.startswith(_LAST):
            st = _stat(path)
            lasts.append((st.st_mtime_ns if st else 0, rel))
            continue
        if not _ckpt_complete(path):
            torn.append((rel, f"{rel} is not a whole torch.save archive (the save was cut)"))
            continue
        match = _STEP_IN_NAME.search(Path(base).name)
        whole.append((int(match.group(1)) if match else -1, rel))
    if not lasts:
        return (max(whole) if whole else None), torn
    for last_mtime, rel in sorted(lasts, reverse=True):
        step, problem = _last_ckpt_step(folder, rel)
        if not problem and step < 0:
            # its pickle does not say (not Lightning's dict): the newest whole step file
            # written before it is the best guess of what it holds
            before = [n for n, r in whole if (_stat(folder / r) or os.lstat(folder)).st_mtime_ns
                      <= last_mtime]
            step = max(before, default=-1)
        if problem:
            torn.append((rel, f"{rel} {problem}: fit(ckpt_path=\"last\") would load it and fail"))
            continue
        for number, other in whole:
            if number > step >= 0 and other not in {r for r, _ in torn}:
                torn.append((other, f"{other} is newer than the step {rel} holds ({step}): its "
                                    "save ended before last.ckpt was written"))
        return (step, rel), torn
    return None, torn


def _lost_last_link(folder: Path, rels: list[str], target: tuple[int, str] | None,
                    unfinished: set[str]) -> tuple[str, str] | None:
    """No ``last*.ckpt`` in a folder whose newest whole step file says (its ModelCheckpoint
    state's ``last_model_path``) that the training keeps one: ``save_last="link"`` removes
    the old link before it links the new file, and the process died in between. ->
    (the link, the step file it would have named); None otherwise."""
    if target is None or any(Path(r).name.startswith(_LAST) for r in rels):
        return None
    step, rel = target
    path = folder / rel
    if step < 0 or not _is_file(path) or rel[: -len(".ckpt")] in unfinished:
        return None
    data = _peek_state_cached(path)
    if not data:
        return None
    for state in data.values():
        last = state.get("last_model_path") if isinstance(state, dict) else None
        if isinstance(last, str) and last:
            name = last.replace("\\", "/").rsplit("/", 1)[-1]
            if name.startswith(_LAST) and name.endswith(".ckpt"):
                parent = rel.rpartition("/")[0]
                return (f"{parent}/{name}" if parent else name), Path(rel).name
    return None


def _peek_state_cached(path: Path) -> dict[str, object] | None:
    """The ``callbacks`` dict of a Lightning checkpoint (plain values only)."""
    def callbacks(data: dict[str, object]) -> dict[str, object] | None:
        found = data.get("callbacks")
        return found if isinstance(found, dict) else None

    return _peek_dict(path, "lightning-callbacks", callbacks)


def _last_ckpt_step(folder: Path, rel: str) -> tuple[int, str]:
    """The step ``last*.ckpt`` holds (-1: whole but unknown), or a problem in words.
    A link (save_last="link") names a step file beside it; it is read, never followed
    out of the checkpoint folder."""
    path = folder / rel
    st = _stat(path)
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            return -1, "is a link that cannot be read"
        name = Path(target).name
        if "/" in target.strip("./") or not _is_file(path.parent / name):
            return -1, f"links to {target!r}, which is not a file beside it"
        if not _ckpt_complete(path.parent / name):
            return -1, f"links to {name}, which is not whole"
        match = _STEP_IN_NAME.search(name[: -len(".ckpt")] if name.endswith(".ckpt") else name)
        return (int(match.group(1)) if match else -1), ""
    if not _ckpt_complete(path):
        return -1, "is not whole (the save was cut)"
    if _is_dir(path):
        match = _STEP_IN_NAME.search(Path(rel).name)
        return (int(match.group(1)) if match else -1), ""
    step = _peek_cached(path, st, "global_step")
    return (-1 if step is None else step), ""


def _peek_cached(path: Path, st: os.stat_result | None, key: str) -> int | None:
    """A value from a torch.save file's pickle, read once per (file, size, mtime)."""
    if st is None:
        return None
    cache_key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, key)
    if cache_key not in _PEEKS:
        from wrapper.checkpoint.ptpeek import peek_int

        if len(_PEEKS) > 256:
            _PEEKS.clear()
        _PEEKS[cache_key] = peek_int(path, key)
    return _PEEKS[cache_key]


_PEEKS: dict[tuple[str, int, int, int, str], int | None] = {}


def _ckpt_paths(folder: Path, prefix: str, names: Iterable[str], *, depth: int
                ) -> Iterable[str]:
    for name in names:
        path = folder / name
        if name.endswith(".ckpt"):
            if _is_file(path) or _is_dir(path) or _is_link(path):
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


def _is_link(path: Path) -> bool:
    st = _stat(path)
    return st is not None and stat.S_ISLNK(st.st_mode)


def _is_file(path: Path) -> bool:
    st = _stat(path)
    return st is not None and stat.S_ISREG(st.st_mode)


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _read_small(path: Path, limit: int = _MAX_TRACKER_BYTES) -> str | None:
    raw = _read_small_bytes(path, limit)
    return None if raw is None else _text(raw)


def _read_small_bytes(path: Path, limit: int = _MAX_TRACKER_BYTES) -> bytes | None:
    """A small regular file's bytes (one read: what is judged is what an upload pins)."""
    st = _stat(path)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        return None
    try:
        with open(path, "rb", opener=_no_follow) as handle:
            raw = handle.read(limit + 1)
    except OSError:
        return None
    return raw if len(raw) <= limit else None


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")
