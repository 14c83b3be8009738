"""A Megatron-Core training with nothing of resched in it (docs/your-training.md): a tiny
model built from megatron.core parts (an MLP of ColumnParallelLinear + RowParallelLinear
from a TransformerConfig), tensor parallel across the ranks, saved and loaded with
``megatron.core.dist_checkpointing`` (torch_dist) in Megatron-LM's layout. Run it with
torchrun (gloo on CPU here, NCCL on GPUs):

    torchrun --standalone --nproc-per-node 2 examples/frameworks/megatron_train.py \\
        --output-dir /tmp/megatron --max-steps 60 --save-steps 10

The save and resume follow Megatron-LM's megatron/training/checkpointing.py (the
megatron-core wheel does not ship megatron.training): ``save_checkpoint`` writes
``<save>/iter_{N:07d}/`` with ``dist_checkpointing.save``, waits for every rank
(barrier), then rank 0 writes ``latest_checkpointed_iteration.txt`` and prints
"successfully saved checkpoint from iteration N"; ``load_checkpoint`` reads the tracker
and loads the folder it names. Its log lines are Megatron-LM's (``iteration N/ M |``,
"successfully loaded checkpoint ... at iteration N", ``[after training is done]``):
resched reads progress from them and judges the tracker + ``iter_N/`` layout.

On CPU only (no effect on GPUs): megatron-core 0.16 calls ``torch.cuda.synchronize()``
after staging tensors for the writer and builds one flag tensor on
``torch.cuda.current_device()`` in the save's finalize step; a CPU build of torch raises
there, so both become CPU no-ops below. The script keeps the ``__main__`` guard:
dist_checkpointing starts a multiprocessing Manager with the "spawn" method, which
re-imports this file in a fresh interpreter; without the guard that child runs
``init_process_group`` again and the save hangs for good.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from megatron.core import dist_checkpointing, parallel_state
from megatron.core.dist_checkpointing.optimizer import (
    get_param_id_to_sharded_param_map,
    optim_state_to_sharding_state,
)
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.mlp import MLP, MLPSubmodules

TRACKER = "latest_checkpointed_iteration.txt"  # checkpointing.get_checkpoint_tracker_filename
HIDDEN = 16


def _cpu_only_shims() -> None:
    if torch.cuda.is_available():
        return
    torch.cuda.synchronize = lambda *args, **kwargs: None  # filesystem_async.preload_tensors
    torch.cuda.current_device = lambda: "cpu"  # state_dict_saver.save_state_dict_async_finalize


def build_model() -> MLP:
    config = TransformerConfig(num_layers=1, hidden_size=HIDDEN, ffn_hidden_size=4 * HIDDEN,
                               num_attention_heads=2, hidden_dropout=0.0,
                               use_cpu_initialization=True)
    return MLP(config, MLPSubmodules(linear_fc1=ColumnParallelLinear,
                                     linear_fc2=RowParallelLinear), ffn_hidden_size=4 * HIDDEN)


def sharded_state(model: MLP, optimizer: torch.optim.Optimizer, iteration: int) -> dict:
    """Megatron-LM's generate_state_dict for torch_dist: the model's and the optimizer's
    sharded state (the optimizer's via Megatron's own helpers), and the iteration."""
    metadata = {"dp_cp_group": parallel_state.get_data_parallel_group(with_context_parallel=True)}
    model_sd = model.sharded_state_dict(prefix="model.", metadata=metadata)
    optim_sd = optimizer.state_dict()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    optim_state_to_sharding_state(optim_sd, get_param_id_to_sharded_param_map(model_sd, params))
    return {"checkpoint_version": 3.0, "iteration": iteration, "model": model_sd,
            "optimizer": optim_sd}


def save_checkpoint(save: str, iteration: int, model: MLP, optimizer: torch.optim.Optimizer
                    ) -> None:
    name = os.path.join(save, f"iter_{iteration:07d}")
    if dist.get_rank() == 0:
        print(f"saving checkpoint at iteration {iteration:7d} to {save} in torch_dist format",
              flush=True)
        os.makedirs(name, exist_ok=True)
    dist.barrier()
    dist_checkpointing.save(sharded_state(model, optimizer, iteration), name)
    dist.barrier()  # "Wait so everyone is done (necessary)"
    if dist.get_rank() == 0:
        with open(os.path.join(save, TRACKER), "w") as tracker:
            tracker.write(str(iteration))
        tp = parallel_state.get_tensor_model_parallel_world_size()
        print(f"  successfully saved checkpoint from iteration {iteration:7d} to {save} "
              f"[ t {parallel_state.get_tensor_model_parallel_rank() + 1}/{tp}, p 1/1 ]",
              flush=True)
    dist.barrier()


def load_checkpoint(load: str, model: MLP, optimizer: torch.optim.Optimizer) -> int:
    tracker = os.path.join(load, TRACKER)
    if not os.path.isfile(tracker):
        if dist.get_rank() == 0:
            print(f"WARNING: could not find the metadata file {tracker}", flush=True)
            print("    will not load any checkpoints and will start from random", flush=True)
        return 0
    with open(tracker) as handle:
        iteration = int(handle.read().strip())
    for group in optimizer.param_groups:  # the state the load fills in (init_state_fn)
        for param in group["params"]:
            optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param)
    loaded = dist_checkpointing.load(sharded_state(model, optimizer, iteration),
                                     os.path.join(load, f"iter_{iteration:07d}"))
    model.load_state_dict({k[len("model."):]: v for k, v in loaded["model"].items()})
    optimizer.load_state_dict(loaded["optimizer"])
    if dist.get_rank() == 0:
        tp = parallel_state.get_tensor_model_parallel_world_size()
        print(f"  successfully loaded checkpoint from {load} [ t 1/{tp}, p 1/1 ] at iteration "
              f"{loaded['iteration']}", flush=True)
    return int(loaded["iteration"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True, help="Megatron's --save / --load")
    parser.add_argument("--max-steps", type=int, default=60, help="--train-iters")
    parser.add_argument("--save-steps", type=int, default=10, help="--save-interval")
    parser.add_argument("--step-time", type=float, default=0.0)
    parser.add_argument("--final-dir", help="write the final weights there (final-tp<rank>.pt)")
    args = parser.parse_args()
    _cpu_only_shims()
    dist.init_process_group("gloo")
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=dist.get_world_size())
    torch.manual_seed(0)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    iteration = load_checkpoint(args.output_dir, model, optimizer)
    batch = 4
    while iteration < args.max_steps:
        iteration += 1
        # the same batch on every tensor-parallel rank, a pure function of the iteration
        x = torch.randn(2, batch, HIDDEN, generator=torch.Generator().manual_seed(iteration))
        out, bias = model(x)  # fc2 adds its bias outside (skip_bias_add)
        out = out if bias is None else out + bias
        loss = torch.nn.functional.mse_loss(out, x.flip(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        time.sleep(args.step_time)
        if dist.get_rank() == 0:  # training_log's line
            print(f" iteration {iteration:8d}/{args.max_steps:8d} | consumed samples: "
                  f"{iteration * batch:12d} | lm loss: {loss.item():.6E} |", flush=True)
        if iteration % args.save_steps == 0:
            save_checkpoint(args.output_dir, iteration, model, optimizer)
    if dist.get_rank() == 0:
        print("[after training is done]", flush=True)
    if iteration % args.save_steps != 0:  # pretrain's final save
        save_checkpoint(args.output_dir, iteration, model, optimizer)
    if args.final_dir:  # one file per tensor-parallel rank (to compare runs)
        rank = parallel_state.get_tensor_model_parallel_rank()
        torch.save(model.state_dict(), os.path.join(args.final_dir, f"final-tp{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
