"""A framework's finished line ends only its own run (wrapper/classifier/success.py,
``still_the_end``): real, unmodified Hugging Face and Lightning trainings whose own end
lines are printed, and then the run goes on or was stopped early.

- a script that calls ``trainer.train()`` twice (a second stage, a k-fold) and whose second
  run is killed: the first run's "Training completed" is no end of this job;
- the HF Trainer stopped early by a SIGTERM handler's callback (checkpoint, then
  ``should_training_stop``): HF prints its usual end lines, the run is not finished;
- Lightning's EarlyStopping refused before ``min_epochs`` ("Training will continue..."),
  then the run is killed: the early-stop line is no end.

Each of the three was "complete" before (a catastrophic decision: nobody restarts an
unfinished model). The scripts are user code around the frameworks, run as real
processes; the log is classified as ``resched classify`` does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.framework_fixtures import needs
from tests.supervise_fixtures import child_env
from wrapper.classifier import classify_artifacts
from wrapper.classifier.rules import load_rules

pytestmark = [pytest.mark.e2e]
RULES = load_rules()

_HF_COMMON = textwrap.dedent("""
    import os, signal, sys, time
    import torch, transformers
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n):
            self.ids = torch.randint(0, 64, (n, 16), generator=torch.Generator().manual_seed(0))
        def __len__(self):
            return len(self.ids)
        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    def trainer(out, max_steps, data, callbacks=()):
        config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
        args = TrainingArguments(output_dir=out, max_steps=max_steps, save_steps=1000,
                                 per_device_train_batch_size=4, logging_steps=1, report_to=[],
                                 use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
        return Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=data,
                       callbacks=list(callbacks))

    transformers.logging.set_verbosity_info()
    torch.manual_seed(0)
""")

_TWO_STAGES = _HF_COMMON + textwrap.dedent("""
    class Slow(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            print(f"stage step {state.global_step}", flush=True)
            time.sleep(0.2)

    out = sys.argv[1]
    trainer(os.path.join(out, "stage1"), 4, Tokens(64)).train()
    # the second stage is killed from outside (the OOM killer, a watchdog) while it runs
    trainer(os.path.join(out, "stage2"), 1000, Tokens(64), [Slow()]).train()
""")

_STOPPED_BY_SIGTERM = _HF_COMMON + textwrap.dedent("""
    asked = []
    signal.signal(signal.SIGTERM, lambda *_: asked.append(True))

    class StopOnSigterm(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            print(f"step {state.global_step}", flush=True)
            time.sleep(0.2)
            if asked:
                print(f"Received SIGTERM, saving checkpoint at step {state.global_step}", flush=True)
                control.should_save = True
                control.should_training_stop = True
            return control

    trainer(sys.argv[1], 1000, Tokens(64), [StopOnSigterm()]).train()
""")

_LIGHTNING_MIN_EPOCHS = textwrap.dedent("""
    import sys, time
    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import EarlyStopping

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)
        def training_step(self, batch, batch_idx):
            print(f"epoch {self.current_epoch} batch {batch_idx}", flush=True)
            time.sleep(0.05)
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            # a metric that never improves: EarlyStopping asks to stop after epoch 0
            self.log("flat", 1.0, on_epoch=True, on_step=False)
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-2)

    torch.manual_seed(0)
    x = torch.randn(32, 8)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                         batch_size=8)
    stop = EarlyStopping(monitor="flat", patience=0, mode="min", verbose=True, check_on_train_epoch_end=True)
    trainer = pl.Trainer(max_epochs=1000, min_epochs=500, callbacks=[stop], accelerator="cpu", logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    trainer.fit(Model(), loader)
""")


def _run(tmp_path: Path, source: str, *, after: str | None = None, times: int = 1,
         sig: signal.Signals = signal.SIGTERM) -> tuple[int, Path]:
    """Run the script; with ``after``, send ``sig`` once its log holds that text ``times`` times."""
    script = tmp_path / "train.py"
    script.write_text(source)
    log = tmp_path / "train.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")], stdout=out,
                                stderr=subprocess.STDOUT, env=child_env(), start_new_session=True)
        try:
            if after is not None:
                deadline = time.monotonic() + 240
                while log.read_text().count(after) < times and proc.poll() is None:
                    assert time.monotonic() < deadline, log.read_text()[-3000:]
                    time.sleep(0.05)
                proc.send_signal(sig)
            code = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return code, log


def _decide(log: Path, code: int) -> tuple[str, str]:
    diagnosis = classify_artifacts(logs=[log], error_files=[], exit_code=code, signal=None, rules=RULES)
    return diagnosis.rule_id, str(diagnosis.decision)


@needs("transformers")
def test_a_first_stage_that_finished_is_no_end_when_the_second_fails(tmp_path: Path) -> None:
    code, log = _run(tmp_path, _TWO_STAGES, after="stage step", times=3, sig=signal.SIGKILL)
    text = log.read_text()
    assert code == -signal.SIGKILL
    # the framework's own lines, as the catastrophic reading saw them
    assert text.count("***** Running training *****") == 2 and "Training completed." in text
    assert _decide(log, 128 + signal.SIGKILL) == ("killed-by-signal", "retry"), text[-3000:]


@needs("transformers")
def test_hf_end_lines_after_a_stop_request_are_no_end(tmp_path: Path) -> None:
    code, log = _run(tmp_path, _STOPPED_BY_SIGTERM, after="step 2\n")
    text = log.read_text()
    assert code == 0 and "Training completed." in text and "Received SIGTERM, saving checkpoint" in text
    assert _decide(log, code) == ("preempted", "reschedule"), text[-3000:]


@needs("lightning")
def test_an_early_stop_lightning_refused_is_no_end(tmp_path: Path) -> None:
    code, log = _run(tmp_path, _LIGHTNING_MIN_EPOCHS, after="epoch 2 batch 1", sig=signal.SIGKILL)
    text = log.read_text()
    assert code == -signal.SIGKILL
    assert "Signaling Trainer to stop." in text and "Training will continue..." in text
    assert _decide(log, 128 + signal.SIGKILL) == ("killed-by-signal", "retry"), text[-3000:]
