"""The largest run the failure simulator takes, so every call returns in bounded time.

Simulated time grows with the number of failures, about ``gpus x days`` (measured:
100,000 GPUs x 30 days = 3e6 GPU-days in ~10 s on one core). ``--days 1e308`` or
``--gpus 1000000000000`` used to run forever; now each is range-checked, and so is
their product, with one line that says what to give instead.
"""

from __future__ import annotations

from workflows.errors import UsageError

MAX_GPUS = 1_000_000  # beyond the largest training clusters built so far
MAX_GPUS_PER_NODE = 1024
MAX_DAYS = 3650.0  # ten years of wall time
MAX_GPU_DAYS = 3_000_000.0  # the product: ~10 s of simulation


def check_scale(gpus: int, gpus_per_node: int, days: float) -> None:
    """Refuse (one line) a run the simulator cannot finish in bounded time."""
    for flag, value, top in (("--gpus", gpus, MAX_GPUS),
                             ("--gpus-per-node", gpus_per_node, MAX_GPUS_PER_NODE)):
        if value > top:
            raise UsageError(f"{value} is more than the simulator takes ({top:,})", where=flag,
                             fix=f"give at most {top:,}")
    if days > MAX_DAYS:
        raise UsageError(f"{days:g} days is more than the simulator takes ({MAX_DAYS:g})",
                         where="--days", fix="simulate at most ten years; ETTR settles within weeks")
    if gpus * days > MAX_GPU_DAYS:
        raise UsageError(
            f"{gpus:,} GPUs x {days:g} days = {gpus * days:,.0f} GPU-days is more than the "
            f"simulator takes ({MAX_GPU_DAYS:,.0f}, about ten seconds)", where="--gpus/--days",
            fix=f"simulate fewer days (at most {MAX_GPU_DAYS / gpus:,.1f} for {gpus:,} GPUs)")
