"""A plain PyTorch loop with resched's optional helper (docs/your-training.md).

``LoopProgress`` prints the exact step, beats the heartbeat, turns a stop signal into a
save at the next step boundary, and writes the finished flag at the end. The checkpoint
is one ``torch.save`` to a temporary name renamed into place (a reader never sees half a
file); resume reads it back.

    python examples/frameworks/plain_loop.py --output-dir /tmp/loop --max-steps 60
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from wrapper.integrations.loop import LoopProgress


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--save-steps", type=int, default=10)
    parser.add_argument("--step-time", type=float, default=0.0)
    args = parser.parse_args()
    os.makedirs(args.output_dir, exist_ok=True)
    path = os.path.join(args.output_dir, "model.pt")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"resched-train: resumed from step {start}", flush=True)
    with LoopProgress(max_steps=args.max_steps) as progress:
        for step in range(start + 1, args.max_steps + 1):
            features = torch.randn(16, 8, generator=torch.Generator().manual_seed(step))
            loss = torch.nn.functional.mse_loss(model(features), features.sum(1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            time.sleep(args.step_time)
            progress.step(step)
            if step % args.save_steps == 0 or progress.stop_requested:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "step": step}, path + ".tmp")
                os.replace(path + ".tmp", path)
                progress.saved(step)
                if progress.stop_requested:
                    break


if __name__ == "__main__":
    main()
