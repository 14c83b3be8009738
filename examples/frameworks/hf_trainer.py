"""A Hugging Face Trainer training with nothing of resched in it (docs/your-training.md).

A tiny GPT-2 built from its config (no download), random tokens, CPU. It saves every
``--save-steps`` with the Trainer's own ``checkpoint-N/`` folders and resumes from the
newest one (``get_last_checkpoint``), which is all resched needs: it reads the progress
bar and ``trainer_state.json``, uploads the folder, and judges what HF would load.

    python examples/frameworks/hf_trainer.py --output-dir /tmp/hf --max-steps 60
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,
                          TrainingArguments)
from transformers.trainer_utils import get_last_checkpoint


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 256

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        tokens = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": tokens, "labels": tokens}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--save-steps", type=int, default=10)
    parser.add_argument("--step-time", type=float, default=0.0,
                        help="sleep per step (a stand-in for real work in the demos)")
    parser.add_argument("--callback", action="store_true",
                        help="add resched's optional callback (heartbeat, finished flag)")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1,
                                       n_head=2))
    training = TrainingArguments(
        args.output_dir, max_steps=args.max_steps, save_steps=args.save_steps,
        logging_steps=args.save_steps, per_device_train_batch_size=4, report_to=[],
        use_cpu=True, seed=0, dataloader_num_workers=0)
    callbacks = []
    if args.callback:
        from wrapper.integrations.hf import ReschedCallback

        callbacks.append(ReschedCallback())
    if args.step_time:
        callbacks.append(_Slow(args.step_time))
    trainer = Trainer(model=model, args=training, train_dataset=RandomTokens(),
                      callbacks=callbacks)
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    trainer.train(resume_from_checkpoint=last)


class _Slow(TrainerCallback):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, *args: object, **kwargs: object) -> None:
        time.sleep(self.seconds)


if __name__ == "__main__":
    main()
