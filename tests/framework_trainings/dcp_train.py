"""A plain 2-rank gloo training with torch.distributed.checkpoint (run under torchrun).
Nothing of resched in it. Resumes, as many hand-written loops do, from the newest
`step-N/` folder, without checking it is whole.

    torchrun --nproc-per-node 2 dcp_train.py CKPT_DIR MAX_STEPS EVERY
"""

import os
import re
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


def main() -> None:
    root, max_steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    steps = sorted(int(m.group(1)) for n in (os.listdir(root) if os.path.isdir(root) else [])
                   if (m := re.match(r"^step-(\d+)$", n)))
    start = 0
    if steps:
        model_sd, optim_sd = get_state_dict(model, opt)  # optimizer state initialised
        state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=os.path.join(root, f"step-{steps[-1]}"))
        set_state_dict(model, opt, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        start = int(state["step"])
    print(f"dcp-train: rank {rank} resumed from step {start}", flush=True)
    for step in range(start + 1, max_steps + 1):
        g = torch.Generator().manual_seed(step * 10 + rank)
        x = torch.randn(16, 8, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():  # the DDP all-reduce, by hand
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        opt.step()
        if step % every == 0:
            model_sd, optim_sd = get_state_dict(model, opt)
            state = {"model": model_sd, "optim": optim_sd, "step": torch.tensor(step)}
            dcp.save(state, checkpoint_id=os.path.join(root, f"step-{step}"))
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(root, "..", "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
