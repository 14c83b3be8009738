"""A plain Lightning training: ModelCheckpoint(every_n_train_steps, save_last=True) and
fit(ckpt_path="last"). Nothing of resched in it.

    python lightning_train.py CKPT_DIR MAX_STEPS EVERY [link]
"""

import os
import sys

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint


class Model(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        return loss

    def on_train_start(self) -> None:
        print(f"lightning-train: training starts at global step {self.trainer.global_step}",
              flush=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def main() -> None:
    ckdir, max_steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    link = len(sys.argv) > 4 and sys.argv[4] == "link"
    pl.seed_everything(0, workers=True)
    g = torch.Generator().manual_seed(0)
    # Every batch holds the same 8 samples: Lightning restarts a mid-epoch iterator on
    # resume (its data position is not restored), so only a data order that cannot move
    # makes the final weights comparable bit for bit with a fault-free run.
    x = torch.randn(8, 8, generator=g).repeat(32, 1)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=False)
    callback = ModelCheckpoint(dirpath=ckdir, every_n_train_steps=every, save_top_k=-1,
                          save_last="link" if link else True)
    trainer = pl.Trainer(max_steps=max_steps, callbacks=[callback], accelerator="cpu",
                         logger=False, enable_progress_bar=False, enable_model_summary=False,
                         deterministic=True)
    model = Model()
    trainer.fit(model, loader, ckpt_path="last")
    print(f"lightning-train: done at global step {trainer.global_step}", flush=True)
    torch.save(model.state_dict(), os.path.join(ckdir, "..", "final.pt"))


if __name__ == "__main__":
    main()
