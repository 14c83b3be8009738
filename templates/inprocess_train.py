"""In-process restart with nvidia_resiliency_ext.inprocess.Wrapper (gloo on CPU).

Run under torchrun (or ft_launcher) and under ``resched wrap``:

    resched wrap --expect-finished-flag /tmp/done -- \\
        torchrun --nproc-per-node 2 examples/inprocess_train.py --steps 40 \\
        --fault once --finished-flag /tmp/done

When a rank raises, the Wrapper aborts the process group on every rank and calls the
training function again in the same processes (no new ``import torch``, the model
stays in memory). Its ``RetryController(max_iterations=N)`` raises ``RestartAbort``
once N restarts are used up; resched then decides by the exception that used them up.

``--fault``: ``none``; ``once`` (rank 1 raises a RuntimeError once: the restart
succeeds); ``value`` (rank 1 raises ValueError on every try: a deterministic bug, the
restarts run out); ``peer`` (rank 1 raises ConnectionError on every try: a peer /
network failure, the restarts run out).
"""

import argparse
import datetime
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist
from nvidia_resiliency_ext import inprocess

PREFIX = "inprocess-train:"


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-time", type=float, default=0.02)
    parser.add_argument("--fault", choices=("none", "once", "value", "peer"), default="none")
    parser.add_argument("--fail-at-step", type=int, default=10)
    parser.add_argument("--max-restarts", type=int, default=2)
    parser.add_argument("--soft-timeout", type=float, default=20.0,
                        help="seconds without progress before the Wrapper aborts and restarts")
    parser.add_argument("--hard-timeout", type=float, default=30.0,
                        help="seconds without progress before the Wrapper kills the rank")
    parser.add_argument("--collective-timeout", type=float, default=5.0,
                        help="gloo timeout: a rank blocked on a failed peer gives up after "
                             "this long (gloo is not aborted by the Wrapper); keep it well "
                             "under --soft-timeout")
    parser.add_argument("--finished-flag", type=Path, default=None)
    return parser.parse_args(argv)


def fault(args: argparse.Namespace, rank: int, iteration: int, step: int) -> None:
    if rank != 1 or step != args.fail_at_step or args.fault == "none":
        return
    if args.fault == "once" and iteration == 0:
        raise RuntimeError(f"injected transient fault at step {step}")
    if args.fault == "value":
        raise ValueError(f"bad value in batch at step {step} (injected, every try)")
    if args.fault == "peer":
        raise ConnectionError(f"peer went away at step {step} (injected, every try)")


def train(args: argparse.Namespace, base_store: Any, model: torch.nn.Module,
          # a real annotation (no `from __future__ import annotations`): the Wrapper
          # finds the parameter to fill in by its type
          call_wrapper: Optional[inprocess.CallWrapper] = None) -> int:
    assert call_wrapper is not None
    iteration = call_wrapper.iteration
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # A fresh process group per restart iteration, on a prefix of the shared store.
    store = dist.PrefixStore(f"iteration-{iteration}", base_store)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.collective_timeout))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1234 + rank)
    print(f"{PREFIX} rank {rank} restart iteration {iteration} starts", flush=True)
    for step in range(1, args.steps + 1):
        call_wrapper.ping()  # progress for the Wrapper's soft / hard timeouts
        fault(args, rank, iteration, step)
        x = torch.randn(8, 4, generator=generator)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        for param in model.parameters():
            dist.all_reduce(param.grad)
            param.grad /= world
        optimizer.step()
        if rank == 0:
            print(f"{PREFIX} step {step} loss {loss.item():.4f}", flush=True)
        time.sleep(args.step_time)
    dist.barrier()
    dist.destroy_process_group()
    return iteration


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    base_store = dist.TCPStore(
        host_name=os.environ["MASTER_ADDR"], port=int(os.environ["MASTER_PORT"]) + 1,
        world_size=world, is_master=rank == 0, multi_tenant=True, wait_for_workers=True,
        use_libuv=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    wrapped = inprocess.Wrapper(
        store_kwargs={"port": int(os.environ["MASTER_PORT"]) + 2},
        initialize=inprocess.initialize.RetryController(max_iterations=args.max_restarts),
        health_check=None,
        soft_timeout=datetime.timedelta(seconds=args.soft_timeout),
        hard_timeout=datetime.timedelta(seconds=args.hard_timeout),
        barrier_timeout=datetime.timedelta(seconds=args.hard_timeout * 2),
        completion_timeout=datetime.timedelta(seconds=args.hard_timeout * 2),
        heartbeat_timeout=datetime.timedelta(seconds=args.soft_timeout / 2),
    )(train)
    iteration = wrapped(args, base_store, model)
    if rank == 0:
        print(f"{PREFIX} finished after {iteration} in-process restart(s)", flush=True)
        if args.finished_flag is not None:
            args.finished_flag.write_text("finished\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
