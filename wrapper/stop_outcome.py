"""Stop signals that save: which signal the training gets, and whether a stop saved.

A stop (preemption, Slurm's grace signal, a time limit) is only free when the training
wrote a checkpoint newer than the one it started from. Otherwise the steps trained
since that checkpoint are gone, and the record must say so ("stopped, N steps lost")
instead of passing for a clean preemption.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from wrapper import progress_lines
from wrapper.errors import ReschedError

# Progress lines of the trainings resched knows: its example (``resched-train: step N``),
# Megatron (`` iteration      120/  1000 |``), Lightning / HF / plain loops (``step=N``,
# ``global_step N``). The largest number seen is the training's last step.
_STEP_PATTERNS = (
    re.compile(r"\biteration\s+(\d+)\s*/\s*\d+"),
    re.compile(r"\b(?:global_)?step[\s=:]+(\d+)\b", re.IGNORECASE),
)
# The same matches, found fast: a pattern that starts with a literal lets re skip to
# each occurrence (a leading \b or IGNORECASE makes it try every position: ~0.2 s per
# MiB of log, which capped the wrapper's scanning at a few MB/s). The word boundary
# before the literal is checked by hand; "step" is searched in the lowered text.
_ITERATION_FAST = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)")
_STEP_FAST = re.compile(r"step[\s=:]+(\d+)\b")
# Only Megatron's own training line names --train-iters as its TOTAL (training_log():
# " iteration N/ TOTAL | consumed samples: ..."); an "iteration 500/500" of an epoch or
# an eval loop says nothing about the end of training.
_MEGATRON_TAIL = re.compile(r"\s*\|\s*consumed samples:")
# mmengine's IterBasedTrainLoop (MMSegmentation, MMDetection 3, ...): LogProcessor writes
# "Iter(train) [  N/MAX]" with MAX = the loop's max_iters (mmengine/runner/log_processor.py);
# its epoch form "Epoch(train) [e][i/len]" counts an epoch's batches and is not read here
_MMENGINE_ITER = re.compile(r"\bIter\(train\) \[\s*(\d+)/(\d+)\]")
# mmcv 1.x's TextLoggerHook (MMSegmentation 0.x, MMDetection 2.x with an IterBasedRunner):
# "Iter [N/MAX]\tlr: ..." in train mode, MAX = runner.max_iters (its validation lines say
# "Iter(val) [N]"); the by-epoch form "Epoch [e][i/len]" counts one epoch and is not read
_MMCV_ITER = re.compile(r"\bIter \[\s*(\d+)/(\d+)\]\s+lr(?:_\w+)?: ")
# YOLOX's Trainer.after_iter: "epoch: E/MAX_EPOCH, iter: I/ITERS_PER_EPOCH, mem: ...": the
# global step is (E - 1) * ITERS + I of MAX_EPOCH * ITERS
_YOLOX_ITER = re.compile(r"\bepoch: (\d+)/(\d+), iter: (\d+)/(\d+), ")
# detectron2's CommonMetricPrinter (and maskrcnn-benchmark's MetricLogger before it):
# "eta: H:MM:SS  iter: N  ..." with the eta of the iterations left to max_iter. The
# PeriodicWriter always writes the last iteration (iter == max_iter - 1), where the eta
# is 0:00:00; earlier lines carry a positive one (an eta under a second at the very end of a
# fast run is the only other 0:00:00). The line names no max_iter: its last reading says
# whether the end was reached.
_ETA_ITER = re.compile(r"\beta: (\d+:\d{2}:\d{2})\s+iter: (\d+)\b")
# OpenNMT-py's ReportMgr / Statistics.output: "Step N/ TOTAL; acc: ..." with TOTAL =
# -train_steps (the "%s/%5d" step format, printed only when train_steps is set)
_ONMT_STEP = re.compile(r"\bStep\s+(\d+)/\s*(\d+); acc: ")
# Keras Model.fit: "Epoch E/EPOCHS" opens each epoch, and its Progbar ends the epoch with
# "STEPS/STEPS [====...]" (Keras 2) or "STEPS/STEPS ━━━━" (Keras 3); the last epoch's bar at
# its target is the end of fit's loop (evaluate / predict bars come without an epoch line)
# (each read at the start of a line, or of its message after a logger's / launcher's
# prefix: "2020-11-24 20:18:25.069 Epoch 5/5" from a job's timestamping wrapper). With
# verbose=2 fit draws no bar: one line closes each epoch, " - 24s - loss: 5.99" (Keras 2.2),
# "938/938 - 3s - loss: 0.29 - accuracy: 0.91" (tf.keras 2.x), "938/938 - 3s - 3ms/step -
# accuracy: 0.91 - loss: 0.29" (Keras 3): keras/src/utils/progbar.py, verbose == 2
_KERAS_EPOCH = re.compile(r"Epoch (\d+)/(\d+)[ \t]*$")
_KERAS_BAR = re.compile(r"[ \t]*(\d+)/(\d+) (?:\[[=>.]+\]|\S*\u2501)")
_KERAS_EPOCH_END = re.compile(
    r"[ \t]*(?:(\d+)/(\d+) )?- \d+(?:\.\d+)?(?:ms|s|m|h)(?: \d+(?:us|ms|s)/step)?"
    r"(?: - \d+(?:us|ms|s)/step)? - \w+: ")
_SEGMENT = re.compile(r"[^\r\n]+")
# The training bar of the diffusers example scripts and the many trainers built from them
# (tqdm(range(0, args.max_train_steps), initial=global_step, desc="Steps"); the loop breaks
# once global_step >= max_train_steps; set_postfix(step_loss=..., lr=...)) and of kohya's
# sd-scripts (desc="steps" over the steps left, postfix avr_loss=...): its N/TOTAL counts
# optimizer steps to the end; the diffusers scripts before step_loss set the postfix to
# exactly {"loss": ..., "lr": ...} ("..., 1.71it/s, loss=0.208, lr=0.0001]"). Other scripts
# draw a "Steps" bar over ONE epoch's batches (100% at every epoch's end), so the bar
# counts only with those scripts' own postfix, as the bar's description at a segment start
# (tqdm redraws with a carriage return), and its LAST reading counts (a per-epoch bar
# starts again from 0).
# (A notebook's copy of the bar has no bar: "Steps: 100% 500/500 [...]".)
# (At most two bracketed prefixes before it: a rank's "[rank0]:", a GUI's relay of the
# script's output as "[2024-09-21 18:38:26] [INFO] steps: ..." (fluxgym).)
_STEPS_BAR = re.compile(r"(?:^|[\r\n])(?:\[[^\]\r\n]{1,40}\]:?[ \t]*){0,2}[ \t]*[Ss]teps: *\d{1,3}%(?:\|[^|\r\n]*\|)?"
                        r"\s*(\d+)/(\d+) \[[^\]\r\n]*(?:\b(?:step_loss|avr_loss)="
                        r"|/(?:s|it), loss=[-+\w.]{1,24}, lr=[-+\w.]{1,24}\])")
# The epoch bar of YOLOv5 (train.py) and Ultralytics (engine/trainer.py _do_train): tqdm
# over one epoch's batches, its description the epoch, then the GPU memory in G, the
# losses and the image size: "     99/99     0.83G   0.04 ...   640: 100%|###| 800/800 [".
# YOLOv5 writes f"{epoch}/{epochs - 1}", Ultralytics f"{epoch + 1}/{epochs}": either way
# the last epoch reads E/E, and its bar at N/N is the training's last step. Read as one
# count, E * N + n of (E_MAX + 1) * N: equal only there (validation bars have no epoch).
_YOLO_EPOCH_BAR = re.compile(r"(?:^|[\r\n])[ \t]*(\d+)/(\d+)[ \t]+\d[\d.]*G[ \t][^|\r\n]*?:[ \t]*\d{1,3}%\|"
                             r"[^|\r\n]*\|[ \t]*(\d+)/(\d+) \[")
# llama-recipes / llama-cookbook's train_utils.train: a tqdm over one epoch's optimizer
# steps, described "Training Epoch: E/EPOCHS, step S/BATCHES completed (loss: L)"; the last
# epoch's bar at N/N is the end of the epoch loop (a max_train_step stop breaks before it).
# Read as one count, (E - 1) * N + n of EPOCHS * N: equal only there.
_LLAMA_RECIPES_BAR = re.compile(r"Training Epoch: (\d+)/(\d+), step \d+/\d+ completed \(loss: [^)\r\n]{0,60}\):"
                                r"[ \t]*\d{1,3}%\|[^|\r\n]*\|[ \t]*(\d+)/(\d+) \[")

# 3D Gaussian Splatting's train.py (graphdeco-inria/gaussian-splatting and the many
# methods forked from it): ONE tqdm over the whole run, tqdm(range(first_iter,
# opt.iterations), desc="Training progress"), advanced by 10 every 10 iterations, its
# postfix the smoothed loss (set_postfix({"Loss": f"{ema:.7f}"}), newer versions add
# "Depth Loss"): N/TOTAL at the last iteration only. Scripts that draw a bar of the same
# description over one epoch's batches ("Training Progress", other postfixes) are not read.
_3DGS_BAR = re.compile(r"(?:^|[\r\n])[ \t]*Training progress: *\d{1,3}%\|?[^|\r\n]*\|[ \t]*(\d+)/(\d+) "
                       r"\[[^\]\r\n]*, Loss=\d+\.\d{7}\b")
# The bars drawn over a whole run, each with the text a line must hold to be worth the
# regex (a cheap `in` test first): its N/TOTAL is read as a progress display's reading.
_WHOLE_RUN_BARS = (("teps:", _STEPS_BAR), ("Training progress:", _3DGS_BAR))
# PySlowFast's per-epoch stats (slowfast/utils/logging.py log_json_stats of
# train_net.py's TrainMeter.log_epoch_stats: {"_type": "train_epoch", "epoch": "E/MAX",
# ...}, E counted from 1): the training epoch E of MAX has ended; E = MAX is the last
_SLOWFAST_TRAIN_EPOCH = re.compile(r'"_type": "train_epoch", "epoch": "(\d+)/(\d+)"')
# The Hugging Face Trainer's bar (ProgressCallback: tqdm(total=max_steps), no description)
# at its total, then a save into ``checkpoint-N`` (or accelerate's ``tmp-checkpoint-N``
# while FSDP writes it) of that same N: the save of the last step (trainer.py
# _maybe_log_save_evaluate after the final step; "Saving model checkpoint to", accelerate's
# fsdp_utils "Saving model to", the config / weights "saved in" lines). An evaluation bar
# drawn between them names another total, so it breaks the pair; a torchrun --tee /
# launcher prefix may stand before the bar, and the save may follow on the same line.
_HF_BAR_AT = re.compile(r"(?<![\w.])\d{1,3}%\|[^|\r\n]*\|[ \t]*(\d+)/(\d+) \[")
_HF_CHECKPOINT_SAVE = re.compile(
    r"\b(?:[Ss]aving|[Ss]aved)\b[^\r\n]*?[/\\](?:tmp-)?checkpoint-(\d+)(?=[/\\\s]|$)")
# ... within a few lines of the bar (the final save's own lines follow it at once): a bar
# at its total long before a periodic save of the same number (a data-preparation bar of
# 1000 items, then the save of step 1000 in a log without the training bar) is no pair
_HF_SAVE_WITHIN_LINES = 20


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"  # re's \w for str patterns


def _starts_word(text: str, start: int) -> bool:
    return start == 0 or not _word_char(text[start - 1])
_SIGNAL_NAMES = {s.name: s for s in signal.Signals}


class StopSignalError(ReschedError):
    """``--stop-signal`` names no signal the training could handle."""


def parse_stop_signal(text: str | int, where: str = "--stop-signal") -> signal.Signals:
    """``TERM``, ``SIGUSR1``, ``usr1`` or ``15`` -> the signal; KILL/STOP are refused
    (a training cannot save on them, which is the point of a stop signal)."""
    raw = str(text).strip()
    if raw.isdigit():
        try:
            sig = signal.Signals(int(raw))
        except ValueError:
            sig = None
    else:
        name = raw.upper()
        sig = _SIGNAL_NAMES.get(name if name.startswith("SIG") else f"SIG{name}")
    if sig is None or sig in (signal.SIGKILL, signal.SIGSTOP):
        raise StopSignalError(
            f"{raw!r} is not a signal a training can catch", where=where,
            fix="use TERM (Megatron, NeMo, torchrun), USR1 (Lightning's SLURM requeue) or INT",
        )
    return sig


class StepTracker:
    """The last training step printed, from the log lines the wrapper forwards."""

    def __init__(self) -> None:
        self.last_step: int | None = None
        # The training loop's own N of TOTAL (Megatron's ``iteration N/ TOTAL``, TOTAL =
        # --train-iters; mmengine's ``Iter(train) [N/MAX]``, mmcv 1.x's ``Iter [N/MAX]``,
        # YOLOX's ``epoch: E/ME, iter: I/MI``; the diffusers scripts' ``Steps:`` bar;
        # detectron2's ``eta: 0:00:00  iter: N`` at its last iteration; OpenNMT-py's ``Step
        # N/TOTAL; acc:``; Keras fit's last epoch bar; YOLOv5's / Ultralytics' epoch bar;
        # mmengine's save after the last iteration, once its ``Iter(train)`` named the total;
        # llama-recipes' "Training Epoch: E/EPOCHS" bar; 3D Gaussian Splatting's "Training
        # progress" bar): the
        # last N and its TOTAL,
        # kept apart from other step counts ("STEP 4945.0" of a Slurm line is no
        # iteration): N = TOTAL is evidence that the training finished.
        self.iteration: int | None = None
        self.total_steps: int | None = None
        self._keras_epoch: tuple[int, int] | None = None  # Keras fit's current "Epoch E/EPOCHS"
        self._hf_bar_full: int | None = None  # the HF bar's last reading, when it was N/N
        self._hf_bar_since = 0  # lines since that reading

    def feed(self, text: str) -> None:
        if "%|" in text:  # a progress bar (the HF Trainer's counts global steps)
            for found in progress_lines.matches(text):
                if found.kind is progress_lines.ProgressKind.STEP and found.step is not None:
                    self._saw(str(found.step))
            if "G " in text:
                for match in _YOLO_EPOCH_BAR.finditer(text):
                    epoch, epochs, batch, batches = (int(g) for g in match.groups())
                    if epoch <= epochs and 0 < batch <= batches:
                        self._read(epoch * batches + batch, (epochs + 1) * batches)
        if "%|" in text or self._hf_bar_full is not None:  # a bar, or the lines after one
            self._hf_last_save(text)
        if '"train_epoch"' in text:
            for match in _SLOWFAST_TRAIN_EPOCH.finditer(text):
                epoch, epochs = int(match.group(1)), int(match.group(2))
                if 0 < epoch <= epochs:
                    self._read(epoch, epochs)
        if "iteration" in text:
            for match in _ITERATION_FAST.finditer(text):
                if not _starts_word(text, match.start()):
                    continue
                if _MEGATRON_TAIL.match(text, match.end()):
                    self._reached(int(match.group(1)), int(match.group(2)))
                else:
                    self._saw(match.group(1))
        if "Training Epoch: " in text:
            for match in _LLAMA_RECIPES_BAR.finditer(text):
                epoch, epochs, step, steps = (int(g) for g in match.groups())
                if 0 < epoch <= epochs and 0 < step <= steps:
                    self._read((epoch - 1) * steps + step, epochs * steps)
        for marker, bar in _WHOLE_RUN_BARS:
            if marker in text:
                for match in bar.finditer(text):
                    self._read(int(match.group(1)), int(match.group(2)))
        if "iter: " in text and "eta: " in text:
            for match in _ETA_ITER.finditer(text):
                step = int(match.group(2)) + 1  # 0-based iteration -> steps done
                ended = match.group(1) in ("0:00:00", "00:00:00")
                self._read(step, step if ended else None)
        if "Epoch " in text or self._keras_epoch is not None:
            self._keras(text)
        if "; acc: " in text:
            for match in _ONMT_STEP.finditer(text):
                self._reached(int(match.group(1)), int(match.group(2)))
        if "Iter [" in text:
            for match in _MMCV_ITER.finditer(text):
                self._reached(int(match.group(1)), int(match.group(2)))
        if ", iter: " in text:
            for match in _YOLOX_ITER.finditer(text):
                epoch, epochs, it, iters = (int(g) for g in match.groups())
                if 0 < epoch <= epochs and 0 < it <= iters:
                    self._reached((epoch - 1) * iters + it, epochs * iters)
        if "Iter(train) [" in text:
            for match in _MMENGINE_ITER.finditer(text):
                self._reached(int(match.group(1)), int(match.group(2)))
        if "Saving checkpoint at " in text and self.total_steps is not None:
            # mmengine's CheckpointHook on an IterBasedTrainLoop saves after iteration N,
            # the last one's too: its train log's lines come every `interval` iterations,
            # so the save (progress_lines' mmengine-saving) may be the only line naming it
            for found in progress_lines.matches(text):
                if (found.pattern.id == "mmengine-saving" and found.step is not None
                        and found.step <= self.total_steps):
                    self._reached(found.step, self.total_steps)
        lowered = text.lower()
        # A character whose lower case is longer ("İ") shifts positions; re.IGNORECASE
        # also takes "ſ" for "s". Both rare: the plain pattern then.
        if len(lowered) != len(text) or "\u017f" in text:
            for match in _STEP_PATTERNS[1].finditer(text):
                self._saw(match.group(1))
            return
        if "step" not in lowered:
            return
        for match in _STEP_FAST.finditer(lowered):
            start = match.start()  # positions are the original text's too
            if _starts_word(text, start) or (
                    lowered.startswith("global_", start - 7) and start >= 7
                    and _starts_word(text, start - 7)):
                self._saw(match.group(1))

    def _hf_last_save(self, text: str) -> None:
        """The HF Trainer's bar at N/N, then a save into ``checkpoint-N``: the last step.
        Every line after a bar at its total counts towards _HF_SAVE_WITHIN_LINES."""
        for found in _SEGMENT.finditer(text):
            segment = found.group()
            events = [(m.start(), int(m.group(1)), int(m.group(2)))
                      for m in _HF_BAR_AT.finditer(segment)]
            if "checkpoint-" in segment:
                events += [(m.start(), int(m.group(1)), None)
                           for m in _HF_CHECKPOINT_SAVE.finditer(segment)]
            if not events and self._hf_bar_full is not None:
                self._hf_bar_since += 1
                if self._hf_bar_since > _HF_SAVE_WITHIN_LINES:
                    self._hf_bar_full = None
            for _, step, total in sorted(events, key=lambda event: event[0]):
                if total is not None:  # a bar's reading
                    self._hf_bar_full = step if 0 < step == total else None
                    self._hf_bar_since = 0
                elif self._hf_bar_full is not None and step == self._hf_bar_full:
                    self._reached(step, step)

    def _keras(self, text: str) -> None:
        """Keras fit's epoch lines and the progress bar (or verbose=2 line) that closes each
        epoch, in order."""
        # here, not at the top: wrapper.classifier's package imports this module
        from wrapper.classifier.line_prefix import without_prefix

        for found in _SEGMENT.finditer(text):
            segment = found.group()
            if not self._keras_line(segment) and ("Epoch " in segment or " - " in segment):
                rest = without_prefix(segment)
                if rest is not None:
                    self._keras_line(rest)

    def _keras_line(self, line: str) -> bool:
        """Read one line of Keras fit's output; whether it was one."""
        match = _KERAS_EPOCH.match(line)
        if match is not None:
            self._keras_epoch = (int(match.group(1)), int(match.group(2)))
            return True
        if self._keras_epoch is None:
            return False
        match = _KERAS_BAR.match(line) or _KERAS_EPOCH_END.match(line)
        if match is None:
            return False
        epoch, epochs = self._keras_epoch
        if match.group(1) is None:  # verbose=2 without the step count: the epoch ended
            if 0 < epoch <= epochs:
                self._read(epoch, epochs)
            return True
        step, steps = int(match.group(1)), int(match.group(2))
        if 0 < epoch <= epochs and 0 < step <= steps:
            self._read((epoch - 1) * steps + step, epochs * steps)
        return True

    def _reached(self, step: int, total: int) -> None:
        """A training loop's own step of its own total (the largest step seen counts)."""
        self._saw(str(step))
        self.iteration = max(self.iteration or 0, step)
        self.total_steps = total

    def _read(self, step: int, total: int | None) -> None:
        """A progress display's current reading (its last reading counts: the display starts
        again for a new epoch or run; a total of None: this reading names no end)."""
        self._saw(str(step))
        self.iteration, self.total_steps = step, total

    def _saw(self, digits: str) -> None:
        step = int(digits)
        if self.last_step is None or step > self.last_step:
            self.last_step = step


@dataclass(frozen=True)
class StopVerdict:
    """How a stopped attempt left its work: ``saved`` or how many steps were lost."""

    saved: bool | None  # None: the wrapper does not know the checkpoint dir
    steps_lost: int | None
    summary: str


def judge_stop(*, step_before: int | None, step_after: int | None,
               last_step: int | None, checkpoint_known: bool) -> StopVerdict:
    """Did the stop leave a checkpoint newer than the one the attempt started from?"""
    if not checkpoint_known:
        return StopVerdict(None, None, "stopped; checkpoint not watched (pass --checkpoint-dir)")
    newer = step_after is not None and (step_before is None or step_after > step_before)
    base = step_after if step_after is not None else 0
    lost = None if last_step is None else max(0, last_step - base)
    if newer and not lost:
        return StopVerdict(True, 0, f"stopped and saved at step {step_after}")
    if newer:
        return StopVerdict(True, lost, f"stopped, saved at step {step_after}, {lost} steps lost")
    lost_text = "an unknown number of" if lost is None else str(lost)
    return StopVerdict(False, lost, f"stopped, {lost_text} steps lost (no newer checkpoint "
                                    f"than step {step_before if step_before is not None else 'none'})")
