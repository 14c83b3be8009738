"""A training that saves the way Megatron-LM and DeepSpeed do, pointer rewritten in place.

Each save writes a new step folder, then rewrites the pointer file in place (``open(...,
"w")``, the same inode), as the frameworks do:

- Megatron-LM (checkpointing.py with dist_checkpointing, torch_dist): ``iter_{N:07d}/``
  with ``common.pt``, one ``__<rank>_0.distcp`` per rank, ``.metadata`` (written as
  ``.metadata.tmp`` and renamed), ``metadata.json`` last; then rank 0 rewrites
  ``latest_checkpointed_iteration.txt`` with N;
- DeepSpeed (engine.py ``save_checkpoint``): ``global_stepN/`` with the model states and
  one ZeRO optimizer file per data-parallel rank (``torch.save`` archives holding what
  DeepSpeed's hold: ``global_steps``, ``dp_world_size``, ``ds_config``); rank 0 copies
  its two recovery scripts (``zero_to_fp32.py``, ``zero_to_torch.py``) into the save dir
  again, in place, then rewrites ``latest`` with the tag.

``--keep K`` removes all but the newest K step folders after each save (the rotation of
HF's ``save_total_limit`` or NeMo's ``save_top_k``; Megatron itself keeps every save).
Run as ``python -m tests.pointer_fixtures --layout megatron --dir D --every 0.02
--stop-file F``: it saves every ``--every`` seconds until F exists, then ends (exit 0).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import time
from pathlib import Path

MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
DEEPSPEED_LATEST = "latest"
DEEPSPEED_HELPERS = ("zero_to_fp32.py", "zero_to_torch.py")
HELPER_BYTES = b"# DeepSpeed's recovery script, the same bytes at every save\n" * 64
RANKS = 2


def _payload(step: int, rank: int, size: int) -> bytes:
    seed = f"step {step} rank {rank} ".encode()
    return (seed * (size // len(seed) + 1))[:size]


def _torch_archive(data: dict) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(data, buffer)
    return buffer.getvalue()


def save_megatron(root: Path, step: int, size: int = 64 * 1024) -> Path:
    folder = root / f"iter_{step:07d}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "common.pt").write_bytes(_payload(step, -1, 1024))
    for rank in range(RANKS):
        (folder / f"__{rank}_0.distcp").write_bytes(_payload(step, rank, size))
    (folder / ".metadata.tmp").write_bytes(f"metadata of {step}".encode())
    os.replace(folder / ".metadata.tmp", folder / ".metadata")
    (folder / "metadata.json").write_text(
        json.dumps({"sharded_backend": "torch_dist", "sharded_backend_version": 1}))
    with open(root / MEGATRON_TRACKER, "w") as tracker:  # in place, as Megatron does
        tracker.write(str(step))
    return folder


def save_deepspeed(root: Path, step: int, size: int = 64 * 1024) -> Path:
    folder = root / f"global_step{step}"
    folder.mkdir(parents=True, exist_ok=True)
    config = {"zero_optimization": {"stage": 1}}
    (folder / "mp_rank_00_model_states.pt").write_bytes(_torch_archive(
        {"global_steps": step, "dp_world_size": RANKS, "mp_world_size": 1, "ds_config": config,
         "module": _payload(step, -1, size)}))
    for rank in range(RANKS):
        (folder / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(
            _torch_archive({"optimizer_state_dict": _payload(step, rank, size)}))
    for helper in DEEPSPEED_HELPERS:  # _copy_recovery_script: shutil.copyfile, every save
        with open(root / helper, "wb") as copy:
            copy.write(HELPER_BYTES)
    with open(root / DEEPSPEED_LATEST, "w") as latest:  # in place, as DeepSpeed does
        latest.write(folder.name)
    return folder


SAVERS = {"megatron": save_megatron, "deepspeed": save_deepspeed}


def step_folders(root: Path) -> list[Path]:
    return sorted((p for p in root.iterdir() if p.is_dir() and p.name[-1].isdigit()),
                  key=lambda p: int("".join(c for c in p.name if c.isdigit())))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layout", choices=sorted(SAVERS), required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--every", type=float, default=0.02)
    parser.add_argument("--stop-file", type=Path, required=True)
    parser.add_argument("--keep", type=int, default=0, help="0: keep every save")
    parser.add_argument("--size", type=int, default=64 * 1024)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    save = SAVERS[args.layout]
    step = 0
    while not args.stop_file.exists():
        step += 1
        save(args.dir, step, args.size)
        if args.keep:
            for old in step_folders(args.dir)[:-args.keep]:
                shutil.rmtree(old)
        print(f" iteration {step:8d}/ {10**6:8d} | saved", flush=True)
        time.sleep(args.every)
    print(f"stopped after step {step}", flush=True)


if __name__ == "__main__":
    main()
