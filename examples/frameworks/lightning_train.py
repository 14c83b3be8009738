"""A PyTorch Lightning training with nothing of resched in it (docs/your-training.md).

``ModelCheckpoint(every_n_train_steps, save_last=True)`` writes ``epoch=E-step=N.ckpt``
and ``last.ckpt``; ``fit(ckpt_path="last")`` resumes from ``last.ckpt``. resched reads the
steps from those file names and Lightning's own restore / finish lines.

    python examples/frameworks/lightning_train.py --output-dir /tmp/pl --max-steps 60
"""

from __future__ import annotations

import argparse
import os

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        features, target = batch
        return torch.nn.functional.mse_loss(self.layer(features), target)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        generator = torch.Generator().manual_seed(0)
        features = torch.randn(512, 8, generator=generator)
        target = features.sum(dim=1, keepdim=True)
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(features, target),
                                           batch_size=8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--save-steps", type=int, default=10)
    parser.add_argument("--step-time", type=float, default=0.0,
                        help="sleep per step (a stand-in for real work in the demos)")
    parser.add_argument("--callback", action="store_true",
                        help="add resched's optional callback (exact progress, heartbeat)")
    args = parser.parse_args()
    torch.manual_seed(0)
    callbacks: list[L.Callback] = [ModelCheckpoint(
        dirpath=args.output_dir, every_n_train_steps=args.save_steps, save_last=True,
        save_top_k=-1)]
    if args.callback:
        from wrapper.integrations.lightning import ReschedCallback

        callbacks.append(ReschedCallback())
    if args.step_time:
        callbacks.append(_Slow(args.step_time))
    trainer = L.Trainer(max_steps=args.max_steps, callbacks=callbacks, accelerator="cpu",
                        logger=False, enable_model_summary=False, enable_progress_bar=False)
    last = os.path.join(args.output_dir, "last.ckpt")
    trainer.fit(Regression(), ckpt_path="last" if os.path.exists(last) else None)


class _Slow(L.Callback):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args: object, **kwargs: object) -> None:
        import time

        time.sleep(self.seconds)


if __name__ == "__main__":
    main()
