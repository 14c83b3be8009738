"""The table of the frameworks' own progress lines (wrapper.progress_lines): every pattern
with a line it must read and a near miss it must not, and the finish watch built on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from wrapper import progress_lines
from wrapper.progress_lines import ProgressKind, match_segment, matches
from wrapper.stop_outcome import StepTracker
from wrapper.teardown import FinishWatch

# pattern id -> (a line as the framework prints it, the step read, a near miss)
CASES: dict[str, tuple[str, int | None, str]] = {
    "resched-loaded": ("resched-train: checkpoint loaded in 0.25 s", None,
                       "resched-train: checkpoint loaded"),
    "resched-resumed": ("resched-train: resumed from step 40", 40, "resumed from step 40"),
    "resched-saved": ("resched-train: checkpoint step 40 save_s 0.1", 40, "checkpoint step 40"),
    "resched-step": ("resched-train: step 41 loss 0.3", 41, "resched-train: stepping"),
    "resched-checksum": ("resched-train: final checksum 0badc0de", None, "final checksum x"),
    "resched-finished": ("resched-train: finished at step 60", 60, "resched-train: finished"),
    "hf-trainer-bar": (" 25%|\u2588\u2588\u258c       | 5/20 [00:00<00:01, 11.46it/s]", 5,
                       "Writing model shards: 100%|\u2588\u2588| 1/1 [00:00<00:00, 13.9it/s]"),
    "hf-trainer-finished": ("{'train_runtime': '1.932', 'train_loss': '3.903'}", None,
                            "{'loss': '3.902', 'train_runtime_x': 1}"),
    "lightning-restored": ("Restored all states from the checkpoint at /ck/epoch=0-step=15.ckpt",
                           15, "Restoring states from the checkpoint path at /ck/last.ckpt"),
    "lightning-finished": ("`Trainer.fit` stopped: `max_steps=30` reached.", 30,
                           "`Trainer.fit` stopped: No training batches."),
    "nemo-progress": ("Training epoch 0, iteration 9/99 | lr: 1e-05 | global_step: 9 | "
                      "reduced_train_loss: 2.1", 9, "Validation: iteration 3/10"),
    "megatron-iteration": (" [2026-11-24 10:00:00] iteration      120/    1000 | consumed "
                           "samples:        15360 |", 120, "iteration 120 of 1000"),
    "megatron-saved": ("  successfully saved checkpoint from iteration     100 to /ck", 100,
                       "saving checkpoint at iteration     100 to /ck"),
    "megatron-loaded": ("  successfully loaded checkpoint from /ck [ t 1/1, p 1/1 ] at "
                        "iteration 100", 100, "loading checkpoint from /ck at iteration 100"),
    "megatron-finished": ("[after training is done] datetime: 2026-11-24 10:00:00 ", None,
                          "[before the start of training step] datetime: 2026"),
    "mmengine-iteration": ("11/25 03:15:42 - mmengine - INFO - Iter(train) [  50/20000]  base_lr: "
                           "1.0e-02 lr: 1.0e-02  eta: 9:01:12", 50,
                           "11/25 03:15:40 - mmengine - INFO - Epoch(train) [3][1000/1000]  lr: 1.0e-02"),
    "mmengine-saving": ("11/25 03:15:43 - mmengine - INFO - Saving checkpoint at 20000 iterations", 20000,
                        "11/25 03:15:43 - mmengine - INFO - Saving checkpoint at 12 epochs"),
    "deepspeed-step": ("[2026-11-24 10:00:00,000] [INFO] [logging.py:107:log_dist] [Rank 0] "
                       "step=10, skipped=0, lr=[0.001], mom=[(0.9, 0.999)]", 10,
                       "[Rank 0] step=10 done"),
    "deepspeed-saving": ("[Rank 0] Saving model checkpoint: /ck/global_step10/"
                         "mp_rank_00_model_states.pt", 10, "[Rank 0] Saving model weights"),
}


def test_every_pattern_has_a_case_and_cites_its_source() -> None:
    assert {p.id for p in progress_lines.PATTERNS} == set(CASES)
    assert all(p.source and p.literal for p in progress_lines.PATTERNS)


@pytest.mark.parametrize("pattern_id", sorted(CASES))
def test_pattern_reads_its_line_and_not_the_near_miss(pattern_id: str) -> None:
    line, step, miss = CASES[pattern_id]
    found = match_segment(line)
    assert found is not None and found.pattern.id == pattern_id
    assert found.step == step
    other = match_segment(miss)
    assert other is None or other.pattern.id != pattern_id


def test_a_progress_bar_is_read_between_carriage_returns() -> None:
    text = ("\r  0%|          | 0/20 [00:00<?, ?it/s]\r  5%|\u258c         | 1/20 [00:00<00:05]"
            "\r 20%|\u2588\u2588        | 4/20 [00:00<00:01]\r\x20\r 25%|\u2588\u2588\u258c  | 5/20 [00:00]\n")
    steps = [(m.step, m.total) for m in matches(text) if m.kind is ProgressKind.STEP]
    assert steps == [(1, 20), (4, 20), (5, 20)]  # 0/20 is no step (it opens every resume)


def test_the_wrappers_step_tracker_reads_the_hf_bar() -> None:
    tracker = StepTracker()
    tracker.feed("\r 50%|\u2588\u2588\u2588\u2588\u2588     | 10/20 [00:00<00:00, 14.30it/s]"
                 "\r 65%|\u2588\u2588\u2588\u2588\u2588\u2588\u258c   | 13/20 [00:00<00:00]\n")
    assert tracker.last_step == 13


def test_finish_watch_hf_line_lightning_line_and_the_flag(tmp_path: Path) -> None:
    clock = iter(range(100)).__next__
    watch = FinishWatch(clock=lambda: float(clock()))
    watch.feed("{'loss': '3.9', 'epoch': '1.0'}\n")
    assert watch.finished() is None
    watch.feed("{'train_runtime': '1.9', 'train_loss': '3.9'}\n")
    seen = watch.finished()
    assert seen is not None and seen.pattern == "hf-trainer-finished"
    flag = tmp_path / "finished.flag"
    flagged = FinishWatch(flag=flag)
    assert flagged.finished() is None
    flag.write_text("")
    said = flagged.finished()
    assert said is not None and said.pattern == "finished-flag"


def test_megatron_is_done_only_after_its_final_save() -> None:
    steps = {"last": 105}
    watch = FinishWatch(last_step=lambda: steps["last"])
    watch.feed("  successfully saved checkpoint from iteration     100 to /ck\n")
    watch.feed("[after training is done] datetime: 2026-11-24 10:00:00\n")
    assert watch.finished() is None  # iteration 105 is still to be saved
    watch.feed("  successfully saved checkpoint from iteration     105 to /ck\n")
    seen = watch.finished()
    assert seen is not None and seen.pattern == "megatron-finished"
    saved_already = FinishWatch(last_step=lambda: 100)
    saved_already.feed("  successfully saved checkpoint from iteration     100 to /ck\n"
                       "[after training is done] datetime: 2026-11-24 10:00:00\n")
    assert saved_already.finished() is not None
