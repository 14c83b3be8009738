"""A plain Hugging Face Trainer training (tiny GPT-2 built from its config, no download):
only the framework's own checkpointing (save_steps, resume from get_last_checkpoint).
Nothing of resched in it.

    python hf_trainer.py OUTPUT_DIR MAX_STEPS SAVE_STEPS
"""

import os
import sys

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 16), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    out, max_steps, save_steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    transformers.logging.set_verbosity_info()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=out, max_steps=max_steps, save_steps=save_steps, per_device_train_batch_size=4,
        learning_rate=1e-3, logging_steps=1, report_to=[], seed=0, data_seed=0,
        use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(64))
    last = get_last_checkpoint(out) if os.path.isdir(out) else None
    trainer.train(resume_from_checkpoint=last)
    trainer.save_model(os.path.join(out, "final"))


if __name__ == "__main__":
    main()
