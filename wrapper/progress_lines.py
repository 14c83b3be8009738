"""What trainings say about their progress: the one table of progress lines resched reads.

A training run under resched needs no resched code: the frameworks already print where
they are. Each pattern below names the framework, what the line means, and where the
line comes from in the framework's own source (checked against the versions in the
venv, or a real run here, when the pattern was written). The executor's timeline
(``workflows.backends.local.timeline``) and the wrapper (its step tracker for lost
steps, its teardown watch) both read this table, so a new framework is one entry here.

Output is read in *segments*: a line ends at ``\\n`` or ``\\r``, because progress bars
(tqdm, which the Hugging Face ``Trainer`` uses) redraw with ``\\r`` and end a line only
when they close.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum


class ProgressKind(str, Enum):
    STEP = "step"  # the training finished step N (of TOTAL when known)
    RESUMED = "resumed"  # the training loaded a checkpoint (of step N when the line says)
    SAVED = "saved"  # a checkpoint of step N was written (or started, see the pattern)
    LOADED = "loaded"  # how long loading the checkpoint took (resched's example only)
    FINISHED = "finished"  # the training says it is done (teardown may still hang)
    CHECKSUM = "checksum"  # resched's example: the final weights' checksum (also "done")


@dataclass(frozen=True)
class ProgressPattern:
    id: str
    framework: str
    kind: ProgressKind
    literal: str  # must occur in the segment: a cheap test before the regex
    regex: re.Pattern[str]
    source: str
    # FINISHED only: the framework saves once more after this line (Megatron), so the
    # training is done only after the next save (or when the last step was saved already)
    save_follows: bool = False


def _p(id: str, framework: str, kind: ProgressKind, literal: str, regex: str, source: str,
       *, save_follows: bool = False) -> ProgressPattern:
    return ProgressPattern(id, framework, kind, literal, re.compile(regex), source, save_follows)


K = ProgressKind
PATTERNS: tuple[ProgressPattern, ...] = (
    # --- resched's own example protocol (examples/ddp_train.py, templates/train.py)
    _p("resched-loaded", "resched", K.LOADED, "resched-train:",
       r"^resched-train: checkpoint loaded in (?P<seconds>[0-9.]+) s", "examples/ddp_train.py"),
    _p("resched-resumed", "resched", K.RESUMED, "resched-train:",
       r"^resched-train: resumed from step (?P<step>\d+)", "examples/ddp_train.py"),
    _p("resched-saved", "resched", K.SAVED, "resched-train:",
       r"^resched-train: checkpoint step (?P<step>\d+)(?: save_s (?P<seconds>[0-9.]+))?",
       "examples/ddp_train.py"),
    _p("resched-step", "resched", K.STEP, "resched-train:",
       r"^resched-train: step (?P<step>\d+)\b", "examples/ddp_train.py"),
    _p("resched-checksum", "resched", K.CHECKSUM, "resched-train:",
       r"^resched-train: final checksum (?P<checksum>[0-9a-fA-F]+)", "examples/ddp_train.py"),
    _p("resched-finished", "resched", K.FINISHED, "resched-train:",
       r"^resched-train: finished at step (?P<step>\d+)", "wrapper/integrations (plain loop)"),
    # --- Hugging Face Trainer (transformers 5.24)
    # ProgressCallback.on_train_begin: tqdm(total=state.max_steps), updated to
    # state.global_step in on_step_end (transformers/trainer_callback.py); tqdm's default
    # bar is "{l_bar}{bar}| {n_fmt}/{total_fmt} [..." with no description, which tells it
    # from the other bars HF draws ("Writing model shards: ...").
    _p("hf-trainer-bar", "hf-trainer", K.STEP, "%|",
       r"^\s*\d+%\|[^|]*\|\s*(?P<step>\d+)/(?P<total>\d+) \[",
       "transformers/trainer_callback.py ProgressCallback (tqdm bar of global_step)"),
    # Trainer._inner_training_loop logs train_runtime once training is over;
    # ProgressCallback.on_log prints the dict (str(logs)) on the main process.
    _p("hf-trainer-finished", "hf-trainer", K.FINISHED, "'train_runtime'",
       r"^\{'train_runtime': ", "transformers/trainer.py _inner_training_loop (metrics log)"),
    # --- PyTorch Lightning 2.x
    _p("lightning-restored", "lightning", K.RESUMED, "Restored all states",
       r"Restored all states from the checkpoint at (?P<path>.+?)\s*$",
       "lightning/pytorch/trainer/connectors/checkpoint_connector.py resume_end"),
    _p("lightning-finished", "lightning", K.FINISHED, "`Trainer.fit` stopped",
       r"^`Trainer\.fit` stopped: `max_(?:steps=(?P<step>\d+)|epochs=\d+)` reached",
       "lightning/pytorch/loops/fit_loop.py done"),
    # --- NeMo 2 ProgressPrinter ("Training epoch E, iteration n/T | ... | global_step: S")
    _p("nemo-progress", "nemo", K.STEP, "| global_step: ",
       r"^Training epoch \d+, iteration \d+/\d+ \|.*\| global_step: (?P<step>\d+)",
       "nemo/lightning/pytorch/callbacks/progress_printer.py on_train_batch_end"),
    # --- Megatron-LM training.py / Megatron-Bridge
    _p("megatron-iteration", "megatron", K.STEP, "iteration",
       r"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*\|",
       "megatron/training/training.py training_log (' iteration {:8d}/{:8d} |')"),
    _p("megatron-saved", "megatron", K.SAVED, "successfully saved checkpoint",
       r"successfully saved checkpoint from iteration\s+(?P<step>\d+)",
       "megatron/training/checkpointing.py save_checkpoint (iter_finalize_fn)"),
    _p("megatron-loaded", "megatron", K.RESUMED, "successfully loaded checkpoint",
       r"successfully loaded checkpoint from .* at iteration (?P<step>\d+)",
       "megatron/training/checkpointing.py load_checkpoint"),
    _p("megatron-finished", "megatron", K.FINISHED, "[after training is done]",
       r"\[after training is done\]",
       "megatron/training/training.py pretrain: print_datetime('after training is done'), "
       "then the final save", save_follows=True),
    # --- mmengine (MMSegmentation, MMDetection 3, ...): the iteration loop's log line
    # names max_iters; its epoch loop's "Epoch(train) [e][i/len]" counts an epoch's batches
    _p("mmengine-iteration", "mmengine", K.STEP, "Iter(train) [",
       r"\bIter\(train\) \[\s*(?P<step>\d+)/(?P<total>\d+)\]",
       "mmengine/runner/log_processor.py get_log_after_iter (IterBasedTrainLoop)"),
    _p("mmengine-saving", "mmengine", K.SAVED, "Saving checkpoint at ",
       r"Saving checkpoint at (?P<step>\d+) iterations\b",
       "mmengine/hooks/checkpoint_hook.py _save_checkpoint (said as the save starts)"),
    # --- DeepSpeed 0.19 (log_dist prefixes "[Rank 0] ")
    _p("deepspeed-step", "deepspeed", K.STEP, "skipped=",
       r"(?:^|\] )step=(?P<step>\d+), skipped=\d+, lr=",
       "deepspeed/runtime/engine.py _report_progress (every steps_per_print)"),
    _p("deepspeed-saving", "deepspeed", K.SAVED, "Saving model checkpoint:",
       r"Saving model checkpoint: .*global_step(?P<step>\d+)[/\\]",
       "deepspeed/runtime/engine.py _save_checkpoint (said as the save starts)"),
)


@dataclass(frozen=True)
class ProgressMatch:
    pattern: ProgressPattern
    step: int | None = None
    total: int | None = None
    seconds: float | None = None
    checksum: str | None = None

    @property
    def kind(self) -> ProgressKind:
        return self.pattern.kind


_STEP_IN_PATH = re.compile(r"(?:^|[-_/\\])step=(\d+)")


def segments(text: str) -> Iterator[str]:
    """The pieces of ``text`` between ``\\r`` and ``\\n`` that hold something."""
    for piece in re.split(r"[\r\n]+", text):
        if piece.strip():
            yield piece


def match_segment(segment: str) -> ProgressMatch | None:
    """The first pattern that matches one segment (no ``\\r`` / ``\\n`` inside)."""
    for pattern in PATTERNS:
        if pattern.literal not in segment:
            continue
        found = pattern.regex.search(segment)
        if found is None:
            continue
        groups = found.groupdict()
        step = int(groups["step"]) if groups.get("step") else None
        if pattern.id == "lightning-restored":
            in_path = _STEP_IN_PATH.search(groups["path"])
            step = int(in_path.group(1)) if in_path else None
        if pattern.kind is ProgressKind.STEP and not step:
            continue  # a bar at 0/N: nothing trained yet (it also opens every resume)
        return ProgressMatch(
            pattern, step=step,
            total=int(groups["total"]) if groups.get("total") else None,
            seconds=float(groups["seconds"]) if groups.get("seconds") else None,
            checksum=groups.get("checksum"),
        )
    return None


def matches(text: str) -> Iterator[ProgressMatch]:
    """Every progress match in ``text`` (one or more lines, ``\\r`` redraws included)."""
    for segment in segments(text):
        found = match_segment(segment)
        if found is not None:
            yield found
