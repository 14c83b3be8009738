#!/usr/bin/env python3
"""Example DDP training for resched: torch, gloo, CPU, bit-exact resume, fault injection.

Launch with torchrun (one node: ``--nproc-per-node 2``; two nodes: two torchruns with
``--nnodes 2 --node-rank 0/1``). Tasks of one group do not share a filesystem, so only
global rank 0 reads and writes ``--checkpoint-dir``; on resume it broadcasts the whole
state (model, optimizer, every rank's RNG and data position, step) to the other ranks.

Log lines (parsed by ``resched run`` for its timeline), printed by rank 0:
  resched-train: checkpoint loaded in S s   (on resume, before the line below)
  resched-train: resumed from step N
  resched-train: step N loss X
  resched-train: checkpoint step N save_s S   (after the files and the marker are written)
  resched-train: stopped by signal after step N (checkpoint step N); not finished
  resched-train: final checksum <sha256 of the concatenated weight bytes>
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import random
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# torch's import prints deprecation noise unrelated to this script; keep stderr readable.
warnings.filterwarnings("ignore", message=".*pynvml.*")
warnings.filterwarnings("ignore", message=".*NumPy.*")

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from wrapper.checkpoint.marker import mark_complete

PREFIX = "resched-train:"
FINISHED_NAME = "FINISHED"
KEEP_LOCAL_CHECKPOINTS = 2
TEMP_TAG = ".resched-tmp-"
FAULT_KINDS = ("nccl", "exit16", "exit17", "oom", "hang", "kill")
# Megatron's rerun state machine saves a checkpoint on every rank and then exits with its
# code; the other faults hit one rank and the rest of the group fails as a consequence.
COLLECTIVE_FAULTS = ("exit16", "exit17")
DATASET_SIZE = 2048
INPUT_DIM = 16
HIDDEN = 64


@dataclass(frozen=True)
class TrainConfig:
    checkpoint_dir: Path
    steps: int
    checkpoint_every: int
    step_time: float
    batch_size: int
    seed: int
    lr: float
    fail_at_step: int | None
    fault: str | None
    fail_rank: int
    fail_once_file: Path | None


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", required=True, type=Path)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--step-time", type=float, default=0.01, help="extra sleep per step (s)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--fail-at-step", type=int, default=None)
    parser.add_argument("--fault", choices=FAULT_KINDS, default=None)
    parser.add_argument("--fail-rank", type=int, default=0)
    parser.add_argument("--fail-once-file", type=Path, default=None)
    ns = parser.parse_args(argv)
    if (ns.fail_at_step is None) != (ns.fault is None):
        parser.error("--fail-at-step and --fault go together")
    if ns.steps < 1 or ns.checkpoint_every < 1:
        parser.error("--steps and --checkpoint-every must be >= 1")
    return TrainConfig(
        checkpoint_dir=ns.checkpoint_dir, steps=ns.steps, checkpoint_every=ns.checkpoint_every,
        step_time=ns.step_time, batch_size=ns.batch_size, seed=ns.seed, lr=ns.lr,
        fail_at_step=ns.fail_at_step, fault=ns.fault, fail_rank=ns.fail_rank,
        fail_once_file=ns.fail_once_file,
    )


def say(text: str) -> None:
    """One write(2) per line: a kill cannot leave half a line for the next attempt's
    first line to be glued to (the timeline parser matches lines from their start)."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), f"{PREFIX} {text}\n".encode())


def load_heartbeat() -> Callable[[], None]:
    """wrapper.heartbeat when resched is importable, else the same env-file contract."""
    beat: object = None
    try:
        from wrapper import heartbeat as beat
    except ImportError:
        pass
    if beat is not None and not callable(beat):  # the submodule shadowed the function
        beat = getattr(beat, "heartbeat", None)
    if callable(beat):
        return beat  # type: ignore[no-any-return]
    path = os.environ.get("RESCHED_HEARTBEAT_FILE")

    def touch() -> None:
        if path:
            Path(path).touch()

    return touch


# ---------------------------------------------------------------- data and model


class DataCursor:
    """Walks this rank's shard of the dataset in an order reshuffled every epoch."""

    def __init__(self, shard: list[int]) -> None:
        self.shard = shard
        self.epoch = 0
        self.offset = 0
        self.order: list[int] = []

    def next_indices(self, batch_size: int) -> list[int]:
        if self.offset + batch_size > len(self.order):
            self.epoch += 1
            self.order = list(self.shard)
            random.shuffle(self.order)  # python's RNG: part of the state a resume restores
            self.offset = 0
        batch = self.order[self.offset:self.offset + batch_size]
        self.offset += batch_size
        return batch

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "offset": self.offset, "order": list(self.order)}

    def load(self, state: dict[str, Any]) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])
        self.order = [int(i) for i in state["order"]]


def make_dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(DATASET_SIZE, INPUT_DIM, generator=gen)
    w = torch.randn(INPUT_DIM, 1, generator=gen)
    y = torch.sin(x @ w) + 0.1 * torch.randn(DATASET_SIZE, 1, generator=gen)
    return x, y


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(INPUT_DIM, HIDDEN), nn.Tanh(), nn.Dropout(0.1),
        nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1),
    )


def weights_checksum(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(bytes(tensor.detach().contiguous().untyped_storage()))
    return digest.hexdigest()


# ---------------------------------------------------------------- checkpoints


def checkpoint_path(directory: Path, step: int) -> Path:
    return directory / f"ckpt-{step:08d}.pt"


def local_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of the checkpoint files in directory, oldest first."""
    found = []
    for path in directory.glob("ckpt-*.pt"):
        digits = path.name[len("ckpt-"):-len(".pt")]
        if digits.isdigit():
            found.append((int(digits), path))
    return sorted(found)


def write_atomic(path: Path, data: bytes) -> None:
    # the checkpoint syncer skips names with this tag, so a torn write is never published
    tmp = path.with_name(f"{path.name}{TEMP_TAG}{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself must survive a crash
    finally:
        os.close(dir_fd)


def read_newest_checkpoint(directory: Path) -> bytes | None:
    """Bytes of the newest loadable checkpoint; a damaged one falls back to the previous."""
    for step, path in reversed(local_checkpoints(directory)):
        data = path.read_bytes()
        try:
            torch.load(io.BytesIO(data), weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file means "try older"
            print(f"{PREFIX} skipping unreadable {path.name}: {exc}", file=sys.stderr, flush=True)
            continue
        return data
    return None


def broadcast_bytes(payload: bytes | None, rank: int) -> bytes | None:
    """Rank 0's bytes (or None) on every rank."""
    size = torch.tensor([-1 if payload is None else len(payload)], dtype=torch.int64)
    dist.broadcast(size, src=0)
    if size.item() < 0:
        return None
    if rank == 0:
        buffer = torch.frombuffer(bytearray(payload or b""), dtype=torch.uint8)
    else:
        buffer = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.broadcast(buffer, src=0)
    return bytes(buffer.untyped_storage())


def gather_to_rank0(obj: dict[str, Any], rank: int, world: int) -> list[Any] | None:
    """Every rank's obj, on rank 0 (None elsewhere). gather_object needs numpy; this not."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    mine = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([mine.numel()], dtype=torch.int64))
    longest = int(max(size.item() for size in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[:mine.numel()] = mine
    received = [torch.empty(longest, dtype=torch.uint8) for _ in range(world)] if rank == 0 else None
    dist.gather(padded, received, dst=0)
    if received is None:
        return None
    return [torch.load(io.BytesIO(bytes(data[:int(size.item())].untyped_storage())),
                       weights_only=True) for data, size in zip(received, sizes)]


@dataclass
class Trainer:
    cfg: TrainConfig
    rank: int
    world: int
    model: nn.Module
    optimizer: torch.optim.Optimizer
    cursor: DataCursor

    def rank_state(self) -> dict[str, Any]:
        return {"torch": torch.get_rng_state(), "python": random.getstate(),
                "data": self.cursor.state()}

    def save(self, step: int, *, last: bool = False) -> None:
        """Collective: every rank sends its RNG/data state; rank 0 alone writes. With
        ``last`` every rank waits for the write, so no rank exits (and gets its peers
        terminated by the launcher) while rank 0 is still writing."""
        started = time.monotonic()
        gathered = gather_to_rank0(self.rank_state(), self.rank, self.world)
        if gathered is not None:
            self._write(step, gathered)
            say(f"checkpoint step {step} save_s {time.monotonic() - started:.4f}")
        if last:
            dist.barrier()

    def _write(self, step: int, gathered: list[Any]) -> None:
        state = {"step": step, "world_size": self.world, "seed": self.cfg.seed,
                 "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "ranks": gathered}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        directory = self.cfg.checkpoint_dir
        write_atomic(checkpoint_path(directory, step), buffer.getvalue())
        for _, old in local_checkpoints(directory)[:-KEEP_LOCAL_CHECKPOINTS]:
            old.unlink(missing_ok=True)
        # the marker lists the files present LAST: deleting after it would leave a
        # directory that no longer matches its marker, which no publisher may upload
        mark_complete(directory, step)

    def restore(self) -> int:
        """Collective: load rank 0's newest checkpoint everywhere; the step it holds (0 if none)."""
        newest = read_newest_checkpoint(self.cfg.checkpoint_dir) if self.rank == 0 else None
        data = broadcast_bytes(newest, self.rank)
        if data is None:
            return 0
        state = torch.load(io.BytesIO(data), weights_only=True)
        if state["world_size"] != self.world or state["seed"] != self.cfg.seed:
            raise SystemExit(
                f"{PREFIX} error: checkpoint step {state['step']} in {self.cfg.checkpoint_dir} was "
                f"written with world size {state['world_size']} and seed {state['seed']}; this run "
                f"has {self.world} and {self.cfg.seed}. Use the same settings or an empty dir.")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        mine = state["ranks"][self.rank]
        torch.set_rng_state(mine["torch"])
        random.setstate(mine["python"])
        self.cursor.load(mine["data"])
        return int(state["step"])


# ---------------------------------------------------------------- faults

NCCL_MESSAGE = (
    "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process "
    "exited or there was a network error, NCCL version 2.21.5\n"
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
    "prematurely.\nLast error:\nNET/IB : Got completion from peer 10.0.0.12<53422> with status=12 "
    "opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.11 remoteGids ::ffff:10.0.0.12 "
    "hca mlx5_0"
)
OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of "
    "which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in "
    "use. Of the allocated memory 74.12 GiB is allocated by PyTorch, and 2.41 GiB is reserved by "
    "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
# Megatron-LM rerun_state_machine.py wording for the two validation exits.
MEGATRON_EXIT = {
    "exit16": (16, "first_rerun_reproducible", [
        ("First rerun: unexpected result is reproducible within the tolerance (nan = nan). "
         "Need to rerun on a different GPU to verify correctness"),
        ("Saving a checkpoint and exiting now. Please resume the job from the checkpoint to "
         "rerun the last iteration and establish a diagnostic"),
    ]),
    "exit17": (17, "first_rerun_not_reproducible", [
        "First rerun: unexpected result is not reproducible within the tolerance (nan != nan)",
        "Possible transient error!",
        ("Exiting now. A checkpoint at the last iteration is being saved if further examination "
         "is needed"),
    ]),
}


def claim_fault(cfg: TrainConfig) -> bool:
    """True if the fault may fire now; with --fail-once-file, only the first time ever."""
    if cfg.fail_once_file is None:
        return True
    if cfg.fail_once_file.exists():
        return False
    cfg.fail_once_file.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(cfg.fail_once_file, f"{cfg.fault} at step {cfg.fail_at_step}\n".encode())
    return True


def fault_fires(cfg: TrainConfig, step: int, rank: int) -> bool:
    if cfg.fault is None or step != cfg.fail_at_step:
        return False
    mine = rank == cfg.fail_rank and claim_fault(cfg)
    if cfg.fault not in COLLECTIVE_FAULTS:
        return mine
    # every rank must agree, and only the failing rank's node holds the once-file
    flag = torch.tensor([1 if mine else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def megatron_exit(trainer: Trainer, step: int) -> None:
    code, status, lines = MEGATRON_EXIT[trainer.cfg.fault or ""]
    if trainer.rank == trainer.cfg.fail_rank:
        print(f"Unexpected result tensor(nan) on rank {trainer.rank} at iteration #{step} "
              "invocation #1 (message='loss is NaN')", file=sys.stderr, flush=True)
        print(f"ts={time.time():.0f} node={os.uname()[1]} device=0 "
              f"jobID={os.environ.get('TORCHELASTIC_RUN_ID', 'none')} rank={trainer.rank} "
              f"iteration={step} status={status} result=nan message='loss is NaN'",
              file=sys.stderr, flush=True)
    if trainer.rank == 0:
        for line in lines:
            print(line, file=sys.stderr, flush=True)
    trainer.save(step - 1, last=True)  # the state before the suspicious iteration, to rerun it
    # os._exit, not destroy_process_group + sys.exit: tearing gloo down can block on a
    # peer that already left, and the launcher would then SIGKILL this rank after its
    # stop timeout instead of seeing Megatron's exit code (interpreter teardown with a
    # live gloo group aborts, so skip it).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fire_fault(trainer: Trainer, step: int) -> None:
    kind = trainer.cfg.fault
    print(f"{PREFIX} injecting fault {kind} at step {step} on rank {trainer.rank}",
          file=sys.stderr, flush=True)
    if kind in COLLECTIVE_FAULTS:
        megatron_exit(trainer, step)
    elif kind == "nccl":
        raise dist.DistBackendError(NCCL_MESSAGE)
    elif kind == "oom":
        raise torch.OutOfMemoryError(OOM_MESSAGE)
    elif kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        while True:  # no progress, no heartbeat: what a stuck collective looks like
            time.sleep(3600)


# ---------------------------------------------------------------- process setup


def init_distributed() -> tuple[int, int]:
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group("gloo")
    else:  # a plain `python ddp_train.py` is a group of one
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size()


def install_stop_handler() -> threading.Event:
    """SIGTERM (preemption): finish the step, checkpoint, exit 0 without FINISHED."""
    requested = threading.Event()

    def on_term(signum: int, _frame: object) -> None:
        # os.write, not print: the handler runs between two bytecodes of the main thread,
        # which may be inside a print to the same stream; a second print then raises
        # "RuntimeError: reentrant call" out of the handler and the training dies
        os.write(2, f"{PREFIX} received signal {signum}; stopping after this step\n".encode())
        requested.set()

    signal.signal(signal.SIGTERM, on_term)
    return requested


def start_orphan_guard(poll_s: float = 0.5) -> None:
    """Exit when the launcher dies: torchrun starts workers in their own session, so a
    SIGKILL to the launcher's group would otherwise leave them training (and writing
    checkpoints) beside the next attempt."""
    launcher = os.getppid()

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(poll_s)
        print(f"{PREFIX} launcher pid {launcher} is gone; exiting", file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-guard", daemon=True).start()


def build_trainer(cfg: TrainConfig, rank: int, world: int) -> Trainer:
    model = make_model(cfg.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    torch.manual_seed(cfg.seed * 1000 + rank + 1)  # dropout and input noise differ per rank
    random.seed(cfg.seed + rank)
    shard = list(range(rank, DATASET_SIZE, world))
    return Trainer(cfg, rank, world, model, optimizer, DataCursor(shard))


# ---------------------------------------------------------------- training


def agree_to_stop(requested: threading.Event) -> bool:
    flag = torch.tensor([1 if requested.is_set() else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # a signal to any rank stops every rank
    return bool(flag.item())


def train(trainer: Trainer, start: int, stop: threading.Event,
          heartbeat: Callable[[], None]) -> bool:
    """Run steps start+1..steps; True when finished, False when stopped by a signal."""
    cfg = trainer.cfg
    x, y = make_dataset(cfg.seed)
    ddp = DistributedDataParallel(trainer.model)
    loss_fn = nn.MSELoss()
    last_saved = start
    for step in range(start + 1, cfg.steps + 1):
        heartbeat()
        if fault_fires(cfg, step, trainer.rank):
            fire_fault(trainer, step)
        idx = torch.tensor(trainer.cursor.next_indices(cfg.batch_size))
        inputs = x[idx] + 0.01 * torch.randn(len(idx), INPUT_DIM)
        loss = loss_fn(ddp(inputs), y[idx])
        trainer.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        trainer.optimizer.step()
        if trainer.rank == 0:
            say(f"step {step} loss {loss.item():.6f}")
        stopping = agree_to_stop(stop)
        if step % cfg.checkpoint_every == 0 or step == cfg.steps or stopping:
            trainer.save(step, last=stopping)
            last_saved = step
        if stopping:
            if trainer.rank == 0:
                say(f"stopped by signal after step {step} (checkpoint step {last_saved}); "
                    "not finished")
            return False
        if cfg.step_time > 0:
            time.sleep(cfg.step_time)
    return True


def write_finished(trainer: Trainer) -> None:
    """Rank 0 writes FINISHED (and the marker last, so it stays the newest file). Each
    node's wrapper looks for the flag in its own checkpoint dir (private per task on
    OSMO), so every other node's local rank 0 writes one too, unless the dir is shared."""
    cfg = trainer.cfg
    flag = cfg.checkpoint_dir / FINISHED_NAME
    if trainer.rank == 0:
        checksum = weights_checksum(trainer.model)
        write_atomic(flag, f"{cfg.steps} {checksum}\n".encode())
        mark_complete(cfg.checkpoint_dir, cfg.steps)
        say(f"final checksum {checksum}")
    dist.barrier()  # rank 0's flag exists before another node looks for it in a shared dir
    if trainer.rank != 0 and os.environ.get("LOCAL_RANK", "0") == "0" and not flag.exists():
        cfg.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(flag, f"{cfg.steps}\n".encode())


@record
def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # thread count changes float reduction order
    stop = install_stop_handler()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if cfg.fault and not 0 <= cfg.fail_rank < world:
        raise SystemExit(f"{PREFIX} error: --fail-rank {cfg.fail_rank} is not a rank of this "
                         f"run (world size {world}); use 0..{world - 1}")
    rank, world = init_distributed()
    start_orphan_guard()
    heartbeat = load_heartbeat()
    if rank == 0:
        cfg.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        for torn in cfg.checkpoint_dir.glob(f"*{TEMP_TAG}*"):  # left by a kill mid-write
            torn.unlink(missing_ok=True)
    trainer = build_trainer(cfg, rank, world)
    loading = time.monotonic()
    start = trainer.restore()
    if rank == 0 and start:
        # what a restart spends loading, apart from starting torch (recovery benchmark)
        say(f"checkpoint loaded in {time.monotonic() - loading:.3f} s")
    if rank == 0:
        say(f"resumed from step {start}" if start else f"starting at step 0 (world size {world})")
    if train(trainer, start, stop, heartbeat):
        write_finished(trainer)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
