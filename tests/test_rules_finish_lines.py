"""Issue 20, ninth round: end-of-training lines of more frameworks, each read in its source
(the catalogue cites it) for whether it is printed ONLY at the end (not in a ``finally``,
not after Ctrl-C, not per generation); the near misses are the candidates the sources
ruled out. And the scope of a finished line (success.py, ``still_the_end``): a training
that starts or goes on after it, or a stop asked for before it, takes its word away."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_rules_tables import diagnose

CRASH = "Segmentation fault (core dumped)"


@pytest.mark.parametrize(("line", "rule"), [
    # YOLOv5 / Ultralytics EarlyStopping.__call__
    ("Stopping training early as no improvement observed in last 100 epochs. Best results observed at epoch 486, "
     "best model saved as best.pt.", "finished-early-stop"),
    ("EarlyStopping: Training stopped early as no improvement observed in last 50 epochs. Best results observed at "
     "epoch 71, best model saved as best.pt.", "finished-early-stop"),
    # mmengine EarlyStoppingHook
    ("11/27 10:02:11 - mmengine - INFO - the monitored metric did not improve in the last 5 records. best score: 0.712. ",
     "finished-early-stop"),
    ("11/27 10:02:11 - mmengine - INFO - Stopping threshold reached: `coco/bbox_mAP` = 0.52 is greater than 0.5.",
     "finished-early-stop"),
    # fairseq2
    ("[11/27/26 10:02:11] INFO     fairseq2 - Early stop requested. Stopping training at step 4200.", "finished-early-stop"),
    ("[11/27/26 10:02:11] INFO     fairseq2 - End of training reached at step 20000.", "finished-fairseq"),
    ("[11/27/26 10:02:11] INFO     fairseq2 - Task finished in 86,342 second(s) after 20,000 step(s)!",
     "finished-fairseq"),
    # MaxText's target loss
    ("Training stopped: Target loss config.target_eval_loss=2.1 is achieved.", "finished-early-stop"),
    # NeMo-RL
    ("Max number of steps has been reached, stopping training early", "finished-script-line"),
    ("Validation accuracy reached the early-stop threshold (0.9120 >= 0.9); stopping training", "finished-early-stop"),
    # torchtitan's save at its last step
    ("[rank0]:[titan] 2026-11-27 10:02:11,201 - root - INFO - Saving a full checkpoint at last step, step 3000.",
     "finished-final-save"),
    # llm-foundry's train(), with its log prefix
    ("2026-11-27 10:02:11,201: rank0[4113][MainThread]: INFO: llmfoundry.command_utils.train: Done.",
     "finished-script-line"),
    # LitGPT finetune
    ("Number of epochs 3 reached, stopping training...", "finished-script-line"),
    # YOLOv5 --evolve, after its last generation
    ("Hyperparameter evolution finished 300 generations", "finished-script-line"),
])
def test_a_finish_line_outranks_a_crash_after_it(tmp_path: Path, line: str, rule: str) -> None:
    d = diagnose(tmp_path, ["step 100 loss 2.31", line, CRASH], exit_code=None, signal=11)
    assert (d.rule_id, str(d.decision)) == (rule, "complete"), d.why_won


@pytest.mark.parametrize("line", [
    # timm: printed after `except KeyboardInterrupt: pass` too
    "*** Best metric: 81.2 (epoch 287)",
    # detectron2 / YOLOX: after_train runs in a finally
    "[04/02 06:29:18 d2.engine.hooks]: Overall training speed: 18 iterations in 0:00:08 (0.4628 s / it)",
    "2026-11-27 10:02:11 | INFO | yolox.core.trainer:196 - Training of experiment is done and the best AP is 40.12",
    # torchtitan's seed checkpoint
    "Saving a full checkpoint at last step, step 0.",
    # MaxText's other stops: a SIGTERM, a failed checkpoint, data
    "Training stopped: Job received termination signal (SIGTERM).",
    # fairseq2 with an empty dataset (no "after N step(s)")
    "Task finished in 3 second(s)!",
    # a bare "Done." without llm-foundry's prefix
    "Done.",
    # time budgets, not ends
    "Max time (120.00m) reached, stopping training...",
    "Timeout has been reached, stopping training early",
    # Lightning's EarlyStopping on a NaN metric
    "Monitored metric val_loss = nan is not finite. Previous best value was 0.512. Signaling Trainer to stop.",
    # Keras restores the best weights after a NaN stop as well
    "Restoring model weights from the end of the best epoch: 12.",
    # an early stop that is a single generation's, and the first stage of two
    "Starting training for 100 epochs...",
])
def test_what_the_sources_ruled_out_is_no_end(tmp_path: Path, line: str) -> None:
    d = diagnose(tmp_path, ["step 100 loss 2.31", line, CRASH], exit_code=None, signal=11)
    assert str(d.decision) != "complete" and not d.finished_by, (d.rule_id, d.why_won)


def test_wandb_footer_with_a_pid_is_an_exit_line(tmp_path: Path) -> None:
    # wandb 0.12.3 - 0.12.10, in a saved log without its status (the upload after it hung):
    # the process reached its normal exit with no error before it
    d = diagnose(tmp_path, ["step 100 loss 2.31", "wandb: Waiting for W&B process to finish, PID 2057... (success).",
                            "wandb: / 146.61MB of 146.75MB uploaded (0.00MB deduped)"], exit_code=None)
    assert (d.rule_id, str(d.decision)) == ("exit-tracker-footer", "complete"), d.why_won
    failed = diagnose(tmp_path, ["step 100 loss 2.31",
                                 "wandb: Waiting for W&B process to finish, PID 2057... (failed 1). Press ctrl-c to abort syncing.",
                                 "wandb: / 146.61MB of 146.75MB uploaded (0.00MB deduped)"], exit_code=None)
    assert str(failed.decision) != "complete"


HF_END = "Training completed. Do not forget to share your model on huggingface.co/models =)"


@pytest.mark.parametrize("lines", [
    # a second trainer.train() began after the first one's end (k-fold, a second stage)
    ["***** Running training *****", HF_END, "***** Running training *****", "  Num examples = 1000"],
    # YOLOv5 --evolve: the next generation after an early-stopped one
    ["Stopping training early as no improvement observed in last 10 epochs. Best results observed at epoch 3, "
     "best model saved as best.pt.", "Starting training for 30 epochs..."],
    # Lightning refused the early stop (min_epochs)
    ["Monitored metric val_loss did not improve in the last 3 records. Best score: 0.123. Signaling Trainer to stop.",
     "Trainer was signaled to stop but the required `min_epochs=10` or `min_steps=None` has not been met. "
     "Training will continue..."],
    # a stop request, then the framework's usual end lines (the HF Trainer after a callback's stop)
    ["Received SIGTERM, saving checkpoint at iteration 4400", HF_END],
    ["Stop detected at step 120", HF_END, "Training finished: mean train_loss=1.23 over 120 steps"],
])
def test_a_finished_line_ends_only_its_own_run(tmp_path: Path, lines: list[str]) -> None:
    for code, sig in ((None, 9), (1, None)):
        d = diagnose(tmp_path, ["step 100 loss 2.31", *lines, "step 101 loss 2.30"], exit_code=code, signal=sig)
        assert str(d.decision) != "complete" and not d.finished_by, (d.rule_id, d.why_won)


@pytest.mark.parametrize("lines", [
    # the second run finished too: its end decides
    ["***** Running training *****", HF_END, "***** Running training *****", HF_END],
    # a run preempted, requeued into the same log, resumed and finished
    ["***** Running training *****", "Received SIGTERM, saving checkpoint at iteration 4400",
     "***** Running training *****", HF_END],
    # a stop after the end is teardown
    [HF_END, "Received SIGTERM, saving checkpoint at iteration 4400"],
])
def test_the_last_run_that_finished_still_counts(tmp_path: Path, lines: list[str]) -> None:
    d = diagnose(tmp_path, ["step 100 loss 2.31", *lines, CRASH], exit_code=None, signal=11)
    assert (d.rule_id, str(d.decision)) == ("finished-hf-trainer", "complete"), d.why_won


@pytest.mark.parametrize("error", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "KeyError: 'model'",
])
def test_a_tracker_footer_the_script_printed_before_it_failed_is_no_exit(tmp_path: Path, error: str) -> None:
    # YOLOX's Trainer.train: after_train (best AP line, wandb_logger.finish()) runs in a
    # finally; the exception's traceback comes after the footer. Saved without its status.
    lines = ["2026-11-27 10:02:11 | INFO | yolox.core.trainer:260 - epoch: 3/300, iter: 10/100, loss: 7.1",
             "2026-11-27 10:02:12 | INFO | yolox.core.trainer:196 - Training of experiment is done and the best AP is 0.00",
             "wandb: Waiting for W&B process to finish... (success).",
             "wandb: Synced 5 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)",
             "Traceback (most recent call last):", '  File "tools/train.py", line 140, in <module>', error]
    d = diagnose(tmp_path, lines, exit_code=None)
    assert str(d.decision) != "complete" and d.rule_id != "exit-tracker-footer", d.why_won


def test_a_tracker_footer_at_exit_with_a_crash_in_teardown_stays_teardown(tmp_path: Path) -> None:
    # wandb's own exit hook printed the footer; the crash came from a destructor after it
    lines = ["step 100 loss 2.31", "wandb: Run summary:", "wandb:   loss 2.31",
             "wandb: Synced 5 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)",
             "terminate called without an active exception"]
    d = diagnose(tmp_path, lines, exit_code=None, signal=6)
    assert (d.rule_id, str(d.decision)) == ("exit-tracker-footer", "complete"), d.why_won


def test_the_diffusers_steps_bar_at_its_total_outranks_a_timeout_in_the_final_save(tmp_path: Path) -> None:
    """A diffusers-style script (tqdm desc="Steps" over max_train_steps) drew its bar to the
    end, then a collective timed out while accelerate saved the state: the training's last
    step is done. The same bar short of its total leaves the timeout to decide."""
    timeout = ("[rank0]:[E1202 16:33:31.475880828 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
               "collective operation timeout: WorkNCCL(SeqNum=140, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
               "Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out.")
    save = "12/02/2024 16:03:31 - INFO - accelerate.accelerator - Saving current state to out/checkpoint-{n}"
    done = diagnose(tmp_path, ["Steps: 100%|##########| 6928/6928 [37:28<00:00, 11.45s/it, lr=2e-05, step_loss=0.125]",
                               save.format(n=6928), timeout], exit_code=1)
    assert (done.rule_id, str(done.decision)) == ("last-step-reached", "complete"), done.why_won
    short = diagnose(tmp_path, ["Steps:  72%|#######   | 5000/6928 [27:02<10:25, 3.08it/s, lr=2e-05, step_loss=0.2]",
                                save.format(n=5000), timeout], exit_code=1)
    assert (short.rule_id, str(short.decision)) == ("nccl-watchdog-timeout", "retry"), short.why_won


@pytest.mark.parametrize(("last", "decision"), [
    ("epoch: 300/300, iter: 925/925, mem: 9000Mb, iter_time: 0.3s, total_loss: 2.0, ETA: 0:00:00", "complete"),
    ("epoch: 300/300, iter: 920/925, mem: 9000Mb, iter_time: 0.3s, total_loss: 2.0, ETA: 0:00:02", "retry"),
])
def test_yoloxs_last_iteration_of_its_last_epoch_outranks_a_crash_after_it(tmp_path: Path, last: str,
                                                                          decision: str) -> None:
    d = diagnose(tmp_path, ["2023-01-01 10:05:00 | INFO | yolox.core.trainer:261 - " + last, CRASH],
                 exit_code=None, signal=11)
    assert str(d.decision) == decision, d.why_won


@pytest.mark.parametrize(("line", "finished"), [
    # a script's own closing line in the other common wordings
    ("Training has been successfully completed.", True),
    ("2024-01-01 10:00:00 - INFO - Successfully finished training, saving model", True),
    ("Done training!", True),
    ("Completed training. Saving the final model", True),
    ("[12:00] Training was successfully completed in 3.2 hours", True),
    ("2024-07-11 09:59:24 - Finish Training", True),
    ("Finish training!", True),
    # ... and the lines that only look like one: a part of the training, or how it failed
    ("Done training epoch 3", False),
    ("Completed training step 500", False),
    ("Completed training on shard 3 of 10", False),
    ("Finish training epoch 3", False),
    ("Failed to finish training: out of disk", False),
    ("Training has not been successfully completed", False),
    ("Completed training with errors", False),
    ("epoch 3: completed training", False),
])
def test_the_script_end_line_wordings(tmp_path: Path, line: str, finished: bool) -> None:
    d = diagnose(tmp_path, ["step 100 loss 2.31", line, CRASH], exit_code=None, signal=11)
    assert (str(d.decision) == "complete") is finished, d.why_won


@pytest.mark.parametrize(("eta", "decision"), [("0:00:00", "complete"), ("0:01:12", "retry")])
def test_detectron2s_last_iteration_outranks_a_crash_in_the_evaluation_after_it(tmp_path: Path, eta: str,
                                                                                decision: str) -> None:
    """detectron2's PeriodicWriter always writes the last iteration, with eta 0:00:00; the
    evaluation that train_net.py runs after training then crashes. An eta left means the
    training had not ended (after_train's speed lines come from a `finally`)."""
    d = diagnose(tmp_path, [
        f"[03/11 09:45:21 d2.utils.events]:  eta: {eta}  iter: 99  total_loss: 0.2059    time: 0.3200  "
        "data_time: 0.0221   lr: 0.0002475  max_mem: 2014M",
        "[03/11 09:45:21 d2.engine.hooks]: Overall training speed: 98 iterations in 0:00:31 (0.3200 s / it)",
        "[03/11 09:45:21 d2.engine.hooks]: Total training time: 0:00:32 (0:00:01 on hooks)",
        "torch.multiprocessing.spawn.ProcessRaisedException: ", "-- Process 0 terminated with the following error:",
        CRASH], exit_code=None, signal=11)
    assert str(d.decision) == decision, d.why_won


@pytest.mark.parametrize(("last_bar", "decision"), [
    ("100/100 [==============================] - 10s 100ms/step - loss: 0.2 - val_loss: 0.3", "complete"),
    (" 40/100 [===========>..................] - ETA: 6s - loss: 0.2", "retry"),
])
def test_keras_fits_last_epoch_outranks_a_crash_after_it(tmp_path: Path, last_bar: str, decision: str) -> None:
    d = diagnose(tmp_path, ["Epoch 10/10", last_bar, CRASH], exit_code=None, signal=11)
    assert str(d.decision) == decision, d.why_won


@pytest.mark.parametrize(("bar", "decision"), [
    # YOLOv5 (epoch/epochs-1) and Ultralytics (epoch+1/epochs): the last epoch's bar at N/N
    ("     99/99     0.83G   0.03993   0.07117  0.000314        87       640: 100%|##########| 800/800 [09:39<00:00,  1.38it/s]",
     "complete"),
    ("    150/150      24.4G      1.027     0.7342      0.999         13       1024: 100%|##########| 469/469 [02:27<00:00]",
     "complete"),
    # ... an earlier epoch's end, or the last epoch's bar short of its end, is no end
    ("     98/99     0.83G   0.03993   0.07117  0.000314        87       640: 100%|##########| 800/800 [09:39<00:00,  1.38it/s]",
     "retry"),
    ("     99/99     0.83G   0.03993   0.07117  0.000314        87       640:  62%|######    | 500/800 [06:01<03:38,  1.38it/s]",
     "retry"),
    # a validation bar has no epoch column
    ("                 Class     Images  Instances      P      R  mAP50  mAP50-95: 100%|##########| 5/5 [00:01<00:00]",
     "retry"),
])
def test_a_yolo_epoch_bar_at_its_last_epochs_end_outranks_a_crash_after_it(tmp_path: Path, bar: str,
                                                                           decision: str) -> None:
    d = diagnose(tmp_path, ["      Epoch    GPU_mem   box_loss   obj_loss   cls_loss  Instances       Size", bar, CRASH],
                 exit_code=None, signal=11)
    assert str(d.decision) == decision, d.why_won
