"""A DeepSpeed training with nothing of resched in it (docs/your-training.md): a tiny
model, ZeRO stage 1 (or 2), data parallel over the ranks, DeepSpeed's own checkpointing
only. Run it with torchrun (on CPU: DeepSpeed's CPU accelerator over gloo):

    DS_ACCELERATOR=cpu torchrun --standalone --nproc-per-node 2 \\
        examples/frameworks/deepspeed_train.py --output-dir /tmp/deepspeed --max-steps 60

Every ``--save-steps`` all ranks call ``engine.save_checkpoint(output_dir)``: DeepSpeed
writes ``<output-dir>/global_stepN/`` (rank 0's ``mp_rank_00_model_states.pt``, one
``zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` per rank) and rank 0 writes the
``latest`` file naming the tag. On start ``engine.load_checkpoint(output_dir)`` loads the
tag ``latest`` names. DeepSpeed's logger is set to INFO so that its own progress lines
(``step=N, skipped=...`` every ``steps_per_print``, ``Saving model checkpoint: ...``)
are printed: resched reads the training's progress from them.

On CPU, DeepSpeed builds its shared-memory communication op with g++ the first time
(~25-60 s, cached in ~/.cache/torch_extensions); small ZeRO buckets keep a CPU step fast.
"""

from __future__ import annotations

import argparse
import os
import time

import deepspeed
import torch
from deepspeed.utils.logging import set_log_level_from_string


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--save-steps", type=int, default=10)
    parser.add_argument("--zero-stage", type=int, default=1, choices=(1, 2))
    parser.add_argument("--step-time", type=float, default=0.0)
    parser.add_argument("--final-dir", help="write the final weights there (final.pt)")
    args = parser.parse_args()
    set_log_level_from_string("info")
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
              "zero_optimization": {"stage": args.zero_stage, "reduce_bucket_size": 2e6,
                                    "allgather_bucket_size": 2e6},
              "steps_per_print": 1}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    rank = engine.global_rank
    path, _ = engine.load_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else (None, None)
    start = engine.global_steps
    if rank == 0:
        print(f"deepspeed-train: loaded {path} at global step {start}", flush=True)
    for step in range(start + 1, args.max_steps + 1):
        features = torch.randn(4, 8, generator=torch.Generator().manual_seed(step * 10 + rank))
        loss = torch.nn.functional.mse_loss(engine(features), features.sum(1, keepdim=True))
        engine.backward(loss)
        engine.step()
        time.sleep(args.step_time)
        if step % args.save_steps == 0:
            engine.save_checkpoint(args.output_dir)
    if rank == 0 and args.final_dir:  # the final weights (to compare runs)
        torch.save(engine.module.state_dict(), os.path.join(args.final_dir, "final.pt"))
    torch.distributed.barrier()


if __name__ == "__main__":
    main()
