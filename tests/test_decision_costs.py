"""The cost table and the success evidence: pure logic, no logs (docs/rules.md, Costs)."""

from __future__ import annotations

import pytest

from wrapper.classifier.costs import CATASTROPHIC, COST, catastrophic, cost, least_regret
from wrapper.decision import Decision
from wrapper.classifier.success import reached_last_step, stopped_short

C, R, S, A = Decision.COMPLETE, Decision.RETRY, Decision.RESCHEDULE, Decision.ABORT


def test_every_pair_has_a_cost_and_only_mistakes_cost() -> None:
    assert set(COST) == {(right, chosen) for right in Decision for chosen in Decision}
    assert all((COST[(d, d)] == 0) for d in Decision)
    assert all(COST[pair] > 0 for pair in COST if pair[0] is not pair[1])


def test_the_catastrophic_mistakes_are_the_two_the_issue_names_and_cost_most() -> None:
    # abort of what a restart fixes; complete of a run that failed or stopped early
    assert CATASTROPHIC == {(R, A), (S, A), (R, C), (S, C), (A, C)}
    worst_ordinary = max(COST[p] for p in COST if p not in CATASTROPHIC)
    assert min(COST[p] for p in CATASTROPHIC) > worst_ordinary
    assert catastrophic("retry", "abort") and not catastrophic("complete", "abort")
    assert cost("abort", "retry") == COST[(A, R)]


@pytest.mark.parametrize(("readings", "chosen"), [
    ([A, R], R),  # a doubted abort: retry once (the repeat aborts)
    ([A, S], S),
    ([C, A], A),  # a deterministic error after the end: someone must look
    ([A], A),
    ([R, S], S),  # retrying on a bad node costs more than moving a transient failure
])
def test_least_regret_picks_the_decision_whose_worst_case_is_cheapest(readings, chosen) -> None:
    assert least_regret(readings) is chosen


def test_progress_says_finished_only_at_its_end() -> None:
    assert reached_last_step(100, 100) and reached_last_step(101, 100)
    assert not reached_last_step(99, 100) and not reached_last_step(None, 100)
    assert not reached_last_step(5, None) and not reached_last_step(0, 0)
    assert stopped_short(99, 100) and not stopped_short(100, 100) and not stopped_short(None, 5)


def test_only_megatrons_training_line_names_the_end_of_training() -> None:
    from wrapper.stop_outcome import StepTracker

    tracker = StepTracker()
    tracker.feed("epoch 1 iteration 500/500 loss 2.0\neval iteration 40/40\n")
    assert (tracker.iteration, tracker.total_steps) == (None, None)  # an epoch's end is not
    tracker.feed(" [2026-11-21 03:15:40] iteration      120/    1000 | consumed samples: 15360 |\n")
    assert (tracker.iteration, tracker.total_steps) == (120, 1000)


def test_mmengines_iteration_loop_names_its_end_its_epoch_loop_does_not() -> None:
    from wrapper.stop_outcome import StepTracker

    tracker = StepTracker()
    tracker.feed("11/25 03:15:40 - mmengine - INFO - Epoch(train) [3][1000/1000]  lr: 1.0e-02  loss: 0.51\n")
    tracker.feed("11/25 03:15:41 - mmengine - INFO - Iter(val) [500/500]    eta: 0:00:00\n")
    assert (tracker.iteration, tracker.total_steps) == (None, None)
    tracker.feed("11/25 03:15:42 - mmengine - INFO - Iter(train) [   50/20000]  base_lr: 1.0e-02 lr: 1.0e-02  eta: 9:01:12\n")
    assert (tracker.iteration, tracker.total_steps, tracker.last_step) == (50, 20000, 50)
    tracker.feed("11/26 12:15:42 - mmengine - INFO - Iter(train) [20000/20000]  base_lr: 1.0e-04 lr: 1.0e-04  eta: 0:00:00\n")
    assert reached_last_step(tracker.iteration, tracker.total_steps)


def test_mmengines_save_at_the_last_iteration_names_the_end_its_log_lines_did_not() -> None:
    from wrapper.stop_outcome import StepTracker

    # the train log's lines come every `interval` iterations; the CheckpointHook's save after
    # the last one may be the only line that names it (xtuner's Gemma run, blind112)
    tracker = StepTracker()
    tracker.feed("05/01 10:00:00 - mmengine - INFO - Iter(train) [6540/6543]  lr: 2.0e-07  eta: 0:00:04\n")
    assert not reached_last_step(tracker.iteration, tracker.total_steps)
    tracker.feed("05/01 10:00:05 - mmengine - INFO - Saving checkpoint at 6000 iterations\n")
    assert (tracker.iteration, tracker.total_steps) == (6540, 6543)  # an earlier save moves nothing
    tracker.feed("05/01 10:00:09 - mmengine - INFO - Saving checkpoint at 6543 iterations\n")
    assert reached_last_step(tracker.iteration, tracker.total_steps)
    # ... and a save says nothing where no loop named its total
    alone = StepTracker()
    alone.feed("05/01 10:00:09 - mmengine - INFO - Saving checkpoint at 6543 iterations\n")
    assert (alone.iteration, alone.total_steps) == (None, None)


def test_mmcv_and_yolox_iteration_lines_name_their_end() -> None:
    from wrapper.stop_outcome import StepTracker

    mmcv = StepTracker()
    # mmcv 1.x by-epoch lines count one epoch; validation lines carry no total
    mmcv.feed("2022-03-01 10:00:00,000 - mmseg - INFO - Epoch [3][500/500]\tlr: 1.000e-02, eta: 1:00:00\n"
              "2022-03-01 10:00:00,000 - mmseg - INFO - Iter(val) [500]\tmIoU: 0.7\n")
    assert (mmcv.iteration, mmcv.total_steps) == (None, None)
    mmcv.feed("2022-03-01 10:00:00,000 - mmseg - INFO - Iter [79950/80000]\tlr: 1.000e-04, eta: 0:00:30, "
              "time: 0.6, data_time: 0.01, memory: 9000, decode.loss_seg: 0.1\n")
    assert (mmcv.iteration, mmcv.total_steps) == (79950, 80000)
    mmcv.feed("2022-03-01 10:00:30,000 - mmseg - INFO - Iter [80000/80000]\tlr: 1.000e-04, eta: 0:00:00, "
              "time: 0.6, data_time: 0.01, memory: 9000, decode.loss_seg: 0.1\n")
    assert reached_last_step(mmcv.iteration, mmcv.total_steps)

    yolox = StepTracker()
    yolox.feed("2023-01-01 10:00:00 | INFO | yolox.core.trainer:261 - epoch: 299/300, iter: 920/925, mem: 9000Mb, "
               "iter_time: 0.3s, data_time: 0.001s, total_loss: 2.1, lr: 1.0e-04, size: 640, ETA: 0:05:00\n")
    assert (yolox.iteration, yolox.total_steps) == (298 * 925 + 920, 300 * 925)
    assert not reached_last_step(yolox.iteration, yolox.total_steps)
    yolox.feed("2023-01-01 10:05:00 | INFO | yolox.core.trainer:261 - epoch: 300/300, iter: 925/925, mem: 9000Mb, "
               "iter_time: 0.3s, data_time: 0.001s, total_loss: 2.0, lr: 1.0e-04, size: 640, ETA: 0:00:00\n")
    assert reached_last_step(yolox.iteration, yolox.total_steps)


def test_keras_fits_last_epoch_bar_names_the_end() -> None:
    from wrapper.stop_outcome import StepTracker

    keras = StepTracker()
    keras.feed("Epoch 9/10\n100/100 [==============================] - 10s 100ms/step - loss: 0.2 - val_loss: 0.3\n"
               "Epoch 10/10\n 40/100 [===========>..................] - ETA: 6s - loss: 0.2\n")
    assert (keras.iteration, keras.total_steps) == (940, 1000)
    assert not reached_last_step(keras.iteration, keras.total_steps)
    keras.feed("100/100 [==============================] - 10s 100ms/step - loss: 0.2 - val_loss: 0.3\n")
    assert reached_last_step(keras.iteration, keras.total_steps)
    # Keras 3's bar; a bar without an epoch line before it (evaluate) names nothing
    keras3 = StepTracker()
    keras3.feed("313/313 \u2501\u2501\u2501\u2501\u2501 1s 3ms/step - accuracy: 0.9\n")
    assert (keras3.iteration, keras3.total_steps) == (None, None)
    keras3.feed("Epoch 5/5\n1875/1875 \u2501\u2501\u2501\u2501\u2501 4s 2ms/step - accuracy: 0.98 - loss: 0.05\n")
    assert reached_last_step(keras3.iteration, keras3.total_steps)


def test_keras_verbose2_epoch_lines_name_the_end_behind_a_prefix() -> None:
    from wrapper.stop_outcome import StepTracker

    # Keras 2.2's verbose=2 line (no step count) closes each epoch; a wrapper's timestamp
    # in front of every line
    old = StepTracker()
    old.feed("2020-11-24 20:17:33.001 Epoch 4/5\n2020-11-24 20:17:59.001 - 25s - loss: 6.0312\n"
             "2020-11-24 20:17:59.002 Epoch 5/5\n")
    assert (old.iteration, old.total_steps) == (4, 5)
    assert not reached_last_step(old.iteration, old.total_steps)
    old.feed("2020-11-24 20:18:25.069 - 24s - loss: 5.9945\n")
    assert reached_last_step(old.iteration, old.total_steps)
    # tf.keras 2.x and Keras 3 count the steps on that line
    tf2 = StepTracker()
    tf2.feed("Epoch 3/3\n938/938 - 3s - loss: 0.2947 - accuracy: 0.9153 - 3s/epoch - 3ms/step\n")
    assert (tf2.iteration, tf2.total_steps) == (3 * 938, 3 * 938)
    keras3 = StepTracker()
    keras3.feed("[rank0]: Epoch 2/3\n[rank0]: 938/938 - 3s - 3ms/step - accuracy: 0.9 - loss: 0.29\n")
    assert (keras3.iteration, keras3.total_steps) == (2 * 938, 3 * 938)
    # a logger's " - " line after an epoch line is no epoch's end
    other = StepTracker()
    other.feed("Epoch 5/5\n2020-11-24 20:18:25,069 - trainer - INFO - saving\n")
    assert (other.iteration, other.total_steps) == (None, None)


def test_opennmts_step_line_names_train_steps() -> None:
    from wrapper.stop_outcome import StepTracker

    onmt = StepTracker()
    onmt.feed("[2019-01-01 10:00:00,000 INFO] Step 99950/100000; acc:  61.20; ppl:  6.10; xent: 1.81; "
              "lr: 0.00010; 9000/9500 tok/s;  36000 sec\n")
    assert (onmt.iteration, onmt.total_steps) == (99950, 100000)
    onmt.feed("[2019-01-01 10:00:30,000 INFO] Step 100000/100000; acc:  61.30; ppl:  6.09; xent: 1.81; "
              "lr: 0.00010; 9000/9500 tok/s;  36030 sec\n")
    assert reached_last_step(onmt.iteration, onmt.total_steps)


def test_detectron2s_eta_names_the_last_iteration() -> None:
    from wrapper.stop_outcome import StepTracker

    d2 = StepTracker()
    d2.feed("[03/11 09:45:14 d2.utils.events]:  eta: 0:00:06  iter: 79  total_loss: 0.2874    time: 0.3191\n")
    assert (d2.iteration, d2.total_steps) == (80, None)
    d2.feed("[03/11 09:45:21 d2.utils.events]:  eta: 0:00:00  iter: 99  total_loss: 0.2059    time: 0.3200\n")
    assert reached_last_step(d2.iteration, d2.total_steps)
    # a later line with an eta left (a resumed run going on) takes the end back
    d2.feed("[03/11 10:00:00 d2.utils.events]:  eta: 1:00:00  iter: 119  total_loss: 0.2    time: 0.3\n")
    assert not reached_last_step(d2.iteration, d2.total_steps)


def test_the_diffusers_steps_bar_names_the_end_other_bars_do_not() -> None:
    from wrapper.stop_outcome import StepTracker

    tracker = StepTracker()
    # a validation bar and a sampler's bar, whatever their counts, name no end of training
    tracker.feed("Validation steps: 100%|##########| 50/50 [00:05<00:00,  9.9it/s]\n"
                 "100%|##########| 25/25 [00:02<00:00, 11.0it/s]\n")
    assert (tracker.iteration, tracker.total_steps) == (None, None)
    # tqdm redraws the bar with carriage returns: one physical line, many segments
    tracker.feed("Steps:  50%|#####     | 3464/6928 [18:44<18:44,  3.08it/s, lr=2e-5, step_loss=0.13]"
                 "\rSteps:  50%|#####     | 3465/6928 [18:44<18:43,  3.08it/s, lr=2e-5, step_loss=0.12]\n")
    assert (tracker.iteration, tracker.total_steps) == (3465, 6928)
    assert not reached_last_step(tracker.iteration, tracker.total_steps)
    tracker.feed("[default0]:steps: 100%|##########| 6928/6928 [37:28<00:00, 11.45s/it, avr_loss=0.1]\n")
    assert reached_last_step(tracker.iteration, tracker.total_steps)
    # a script's own "Steps" bar over one epoch's batches (no diffusers / kohya postfix) is
    # not read; nor a bar that started again: its last reading counts
    other = StepTracker()
    other.feed("Steps: 100%|##########| 1000/1000 [01:40<00:00, 10.0it/s, loss=0.3]\n")
    assert (other.iteration, other.total_steps) == (None, None)
    # ... nor with more than the older diffusers scripts' exact {"loss", "lr"} postfix
    other.feed("Steps: 100%|##########| 1000/1000 [01:40<00:00, 10.0it/s, loss=0.3, lr=1e-4, acc=0.9]\n")
    assert (other.iteration, other.total_steps) == (None, None)
    other.feed("Steps: 100%|##########| 1000/1000 [01:40<00:00, 10.0it/s, step_loss=0.3]\n"
               "Steps:   4%|4         | 37/1000 [00:04<01:40,  9.6it/s, step_loss=0.4]\n")
    assert (other.iteration, other.total_steps) == (37, 1000)
    older = StepTracker()  # which that postfix is
    older.feed("Steps: 100%|##########| 500/500 [06:52<00:00,  1.71it/s, loss=0.208, lr=0.0001]\n")
    assert reached_last_step(older.iteration, older.total_steps)
    notebook = StepTracker()  # a notebook's copy of the same bar, without the bar
    notebook.feed("Steps: 100% 100/100 [05:56<00:00,  3.38s/it, loss=0.0255, lr=0.0001]\n")
    assert reached_last_step(notebook.iteration, notebook.total_steps)
    relayed = StepTracker()  # a GUI relaying the script's output (fluxgym): two prefixes
    relayed.feed("[2024-09-21 18:38:26] [INFO] steps: 100%|##########| 3040/3040 [1:46:51<00:00,  2.11s/it, avr_loss=0.294]\n")
    assert reached_last_step(relayed.iteration, relayed.total_steps)
    # ... but the bar must start the message: a third bracket is some other text's
    buried = StepTracker()
    buried.feed("[a] [b] [c] steps: 100%|##########| 3040/3040 [1:46:51<00:00,  2.11s/it, avr_loss=0.294]\n")
    assert (buried.iteration, buried.total_steps) == (None, None)


def test_llama_recipes_epoch_bar_ends_only_at_the_last_epoch() -> None:
    """llama-recipes' bar is per epoch: 100% of epoch 1 of 2 is no end, of epoch 2 is."""
    from wrapper.stop_outcome import StepTracker

    tracker = StepTracker()
    tracker.feed("Training Epoch: 1/2, step 11/12 completed (loss: 1.80): 100%|##########| 6/6 [01:09<00:00, 11.5s/it]\n")
    assert (tracker.iteration, tracker.total_steps) == (6, 12)
    assert not reached_last_step(tracker.iteration, tracker.total_steps)
    tracker.feed("Training Epoch: 2/2, step 5/12 completed (loss: 1.61):  50%|#####     | 3/6 [00:35<00:35, 11.5s/it]\n")
    assert not reached_last_step(tracker.iteration, tracker.total_steps)
    tracker.feed("Training Epoch: 2/2, step 11/12 completed (loss: 1.58): 100%|##########| 6/6 [01:09<00:00, 11.5s/it]\n")
    assert reached_last_step(tracker.iteration, tracker.total_steps)


def test_the_gaussian_splatting_bar_is_the_whole_run_other_training_progress_bars_are_not() -> None:
    """3DGS draws one bar over every iteration (postfix Loss=<7 decimals>): N/N is its end.
    A script's "Training Progress" bar over one epoch's batches names no end."""
    from wrapper.stop_outcome import StepTracker

    tracker = StepTracker()
    tracker.feed("Training progress:  60%|######    | 18000/30000 [07:14<04:50, 41.3it/s, Loss=0.0795816]\n")
    assert (tracker.iteration, tracker.total_steps) == (18000, 30000)
    assert not reached_last_step(tracker.iteration, tracker.total_steps)
    tracker.feed("Training progress: 100%|##########| 30000/30000 [12:22<00:00, 40.39it/s, "
                 "Loss=0.0625064, Depth Loss=0.0000000]\n")
    assert reached_last_step(tracker.iteration, tracker.total_steps)
    other = StepTracker()
    other.feed("Training Progress: 100%|##########| 391/391 [01:55<00:00,  3.38it/s, loss=0.592]\n"
               "Training progress: 100%|##########| 391/391 [01:55<00:00,  3.38it/s, loss=0.592]\n")
    assert (other.iteration, other.total_steps) == (None, None)


def test_the_hf_bar_at_its_total_then_the_save_of_that_step_is_the_last_step() -> None:
    """The HF Trainer's bar at N/N, then a save into checkpoint-N (or accelerate's
    tmp-checkpoint-N), also behind a launcher's prefix and on the bar's own line: the
    last step. A save of another step, or an evaluation bar between them, is not."""
    from wrapper.stop_outcome import StepTracker

    tracker = StepTracker()
    tracker.feed("[default0]: 97%|#########7| 36/37 [26:12<00:41, 41.16s/it]\n")
    assert not reached_last_step(tracker.iteration, tracker.total_steps)
    tracker.feed("[default0]:100%|##########| 37/37 [26:58<00:00, 42.63s/it][default0]:07/01/2024 "
                 "01:54:14 - INFO - accelerate.utils.fsdp_utils -   Saving model to "
                 "/out/tmp-checkpoint-37/pytorch_model_fsdp.bin\n")
    assert (tracker.iteration, tracker.total_steps) == (37, 37)
    assert reached_last_step(tracker.iteration, tracker.total_steps)

    periodic = StepTracker()  # the bar at its end, but the save is of step 500
    periodic.feed("100%|##########| 50/50 [00:20<00:00,  2.50it/s]\n"
                  "Saving model checkpoint to /out/checkpoint-500\n")
    assert not reached_last_step(periodic.iteration, periodic.total_steps)

    evaluated = StepTracker()  # an evaluation bar drawn between the two breaks the pair
    evaluated.feed(" 99%|#########9| 99/100 [10:00<00:06,  6.0s/it]\n"
                   "100%|##########| 100/100 [10:06<00:00,  6.0s/it]\n"
                   " 50%|#####     | 4/8 [00:01<00:01,  3.1it/s]\n"
                   "Saving model checkpoint to /out/checkpoint-100\n")
    assert not reached_last_step(evaluated.iteration, evaluated.total_steps)

    late = StepTracker()  # a bar at its total long before a save of that number
    late.feed("Map: 100%|##########| 1000/1000 [00:02<00:00, 480.1 examples/s]\n"
              "100%|##########| 1000/1000 [00:02<00:00, 480.1it/s]\n")
    for step in range(1, 40):
        late.feed(f"{{'loss': 1.{step:02d}, 'learning_rate': 1e-05, 'epoch': 0.{step:02d}}}\n")
    late.feed("Saving model checkpoint to /out/checkpoint-1000\n")
    assert not reached_last_step(late.iteration, late.total_steps)

    unsaved = StepTracker()  # a save line without a save word is not read
    unsaved.feed("100%|##########| 20/20 [00:20<00:00,  1.00it/s]\n"
                 "loading /out/checkpoint-20/trainer_state.json\n")
    assert not reached_last_step(unsaved.iteration, unsaved.total_steps)


def test_the_accuracy_benchmark_counts_catastrophic_decisions(tmp_path) -> None:
    """benchmarks/classify_accuracy.py on a two-log set: a hub 504 labelled retry (right)
    and the same log labelled abort (resched retries it: a wrong, not catastrophic,
    decision); a finished training labelled retry would be catastrophic if completed."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("hub-504", "hf-finished-then-nccl-teardown"):
        shutil.copy(repo / "tests" / "fixtures" / "logs" / f"{name}.log", logs / f"{name}.log")
    shutil.copy(logs / "hub-504.log", logs / "hub-504-b.log")
    (tmp_path / "set.yaml").write_text(
        "entries:\n"
        "  - {id: hub-504, label: retry, exit_code: 1, family: remote}\n"
        "  - {id: hub-504-b, label: abort, exit_code: 1, family: remote}\n"
        "  - {id: hf-finished-then-nccl-teardown, label: retry, exit_code: 1, family: teardown}\n")
    out = subprocess.run([sys.executable, str(repo / "benchmarks" / "classify_accuracy.py"),
                          str(tmp_path / "set.yaml")], capture_output=True, text=True, check=True,
                         cwd=repo).stdout
    assert "right: 1/3" in out and "catastrophic: 1" in out  # complete of a 'retry' run
    assert "hf-finished-then-nccl-teardown: right retry, resched complete" in out
    assert "remote: 1/2" in out and "teardown: 0/1" in out
