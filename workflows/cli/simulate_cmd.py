"""``resched simulate``: the real policy against a month of failures at any scale."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import click

from workflows.errors import UsageError
from wrapper.durations import parse_duration
from wrapper.errors import ReschedError


def _duration(value: str, flag: str) -> float:
    try:
        return parse_duration(value, where=flag)
    except ReschedError as error:
        raise UsageError(f"{value!r} is not a duration", where=flag,
                         fix="give seconds (60) or a duration (5m, 1h)") from error


def _positive_int(value: int, flag: str) -> int:
    if value < 1:
        raise UsageError(f"{value} is not a positive number", where=flag, fix="give 1 or more")
    return value


@click.command("simulate")
@click.option("--gpus", type=int, required=True, help="GPUs in the job.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True)
@click.option("--days", type=float, default=30.0, show_default=True, help="Simulated time.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--policy", type=click.Choice(["resched", "osmo-static", "nemo-budgets", "torchrun"]),
              default="resched", show_default=True)
@click.option("--trace", type=click.Path(path_type=Path), default=None,
              help="Failures from a JSON Lines file ({\"t\": s, \"kind\": ..., \"node\": i}) "
                   "instead of the generated Llama 3 mix.")
@click.option("--checkpoint-interval", default="auto", show_default=True,
              help="Wall time from one checkpoint to the next, or 'auto' (Young's interval).")
@click.option("--checkpoint-cost", default="60", show_default=True,
              help="Seconds a checkpoint blocks training (the whole copy with --async-block).")
@click.option("--async-block", default=None,
              help="Async checkpoint: seconds it blocks; the copy takes --checkpoint-cost.")
@click.option("--restart-cost", default="300", show_default=True,
              help="Detection -> first new step for an in-place restart, in seconds.")
@click.option("--resubmit-after", default=None,
              help="A human resubmits a failed job after this long (default: it stays failed).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--plot", type=click.Path(path_type=Path), default=None,
              help="Write ETTR vs interval and vs scale for all policies (HTML).")
def simulate(gpus: int, gpus_per_node: int, days: float, seed: int, policy: str,
             trace: Path | None, checkpoint_interval: str, checkpoint_cost: str,
             async_block: str | None, restart_cost: str, resubmit_after: str | None, fmt: str,
             plot: Path | None) -> None:
    """Replay failures through resched's decision code (or a baseline) and report ETTR."""
    from workflows.simulate import SimConfig, run
    from workflows.simulate.engine import Mechanics
    from workflows.simulate.failures import load_trace

    _positive_int(gpus, "--gpus")
    _positive_int(gpus_per_node, "--gpus-per-node")
    if not (math.isfinite(days) and days > 0):
        raise UsageError(f"{days} is not a number of days", where="--days", fix="give e.g. 30")
    from workflows.simulate.limits import check_scale

    check_scale(gpus, gpus_per_node, days)
    cost = _duration(checkpoint_cost, "--checkpoint-cost")
    block = _duration(async_block, "--async-block") if async_block is not None else None
    if block is not None and block > cost:
        raise UsageError("the async block is longer than the whole copy", where="--async-block",
                         fix="give a value <= --checkpoint-cost")
    interval = None if checkpoint_interval.strip().lower() == "auto" else _duration(
        checkpoint_interval, "--checkpoint-interval")
    blocking = block if block is not None else cost
    if interval is not None and interval <= blocking:
        raise UsageError(f"the interval ({interval:g} s) must be longer than a blocking "
                         f"checkpoint ({blocking:g} s)", where="--checkpoint-interval",
                         fix="give a longer interval or 'auto'")
    mechanics = Mechanics(checkpoint_interval_s=0.0, checkpoint_cost_s=cost, async_block_s=block,
                          restart_cost_s=_duration(restart_cost, "--restart-cost"),
                          resubmit_after_s=_duration(resubmit_after, "--resubmit-after")
                          if resubmit_after is not None else None)
    config = SimConfig(gpus=gpus, gpus_per_node=gpus_per_node, days=days, seed=seed,
                       policy=policy, checkpoint_interval_s=interval, mechanics=mechanics,
                       trace=load_trace(trace) if trace is not None else None)
    result = run(config)
    if plot is not None:
        from workflows.simulate.plot import interval_sweep, render, scale_sweep

        page = render(config, interval_sweep(config), scale_sweep(replace(config, trace=None)))
        plot.write_text(page, encoding="utf-8")
        result["plot"] = str(plot)
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(text_summary(result))


def text_summary(result: dict) -> str:  # type: ignore[type-arg]
    lost = result["lost_time_s"]
    total_lost = sum(lost.values())
    parts = ", ".join(f"{k} {v / 3600:.1f} h" for k, v in lost.items() if v > 0)
    ratio = result["young_daly_ratio"]
    lines = [
        f"{result['policy']}: {result['gpus']:,} GPUs, {result['days']:g} days: "
        f"ETTR {result['ettr']:.3f}"
        + (f" ({ratio:.3f} of the Young/Daly optimum {result['young_daly_ettr']:.3f})"
           if ratio is not None else ""),
        (f"{result['interruptions']} interruptions, checkpoint every "
        f"{result['checkpoint_interval_s'] / 60:.1f} min; lost {total_lost / 3600:.1f} h: {parts}"),
        "job FAILED (a budget ran out or the policy aborted)" if result["failed"] else
        f"job kept running; {result['excluded_nodes']} nodes excluded",
        ("recommendation: checkpoint every "
        f"{(result['recommendation']['checkpoint_interval_s'] or 0) / 60:.1f} min, "
        f"max retries {result['recommendation']['max_retries']}, "
        f"max reschedules {result['recommendation']['max_reschedules']}"),
    ]
    if "plot" in result:
        lines.append(f"plot: {result['plot']}")
    return "\n".join(lines)


COMMANDS: list[click.Command] = [simulate]
