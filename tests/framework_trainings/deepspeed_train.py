"""A plain DeepSpeed training (ZeRO stage 1, 2 ranks on CPU/gloo under torchrun): only
DeepSpeed's own checkpointing (save_checkpoint every N steps, load_checkpoint reading
`latest`). Nothing of resched in it.

    DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 deepspeed_train.py CKPT_DIR MAX_STEPS EVERY
"""

import os
import sys

import deepspeed
import torch


def main() -> None:
    root, max_steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
              "zero_optimization": {"stage": 1, "reduce_bucket_size": 2e6,
                                    "allgather_bucket_size": 2e6},
              "steps_per_print": 1000}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    rank = engine.global_rank
    path, _ = engine.load_checkpoint(root) if os.path.isdir(root) else (None, None)
    start = engine.global_steps
    print(f"deepspeed-train: rank {rank} loaded {path} at global step {start}", flush=True)
    for step in range(start + 1, max_steps + 1):
        g = torch.Generator().manual_seed(step * 10 + rank)
        x = torch.randn(4, 8, generator=g)
        loss = torch.nn.functional.mse_loss(engine(x), x.sum(1, keepdim=True))
        engine.backward(loss)
        engine.step()
        if step % every == 0:
            engine.save_checkpoint(root)
    if rank == 0:
        torch.save(engine.module.state_dict(), os.path.join(root, "..", "final.pt"))
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
