"""``resched simulate --plot``: ETTR against the checkpoint interval and against scale.

One self-contained HTML page (inline SVG, no script, no network): a line per policy and
the analytic Young/Daly curve, so the page opens anywhere and can be attached to a
design review as it is.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from workflows.simulate import POLICIES, SimConfig, run, young_daly

SCALES = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 100_000)
INTERVAL_FACTORS = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0)
_COLOURS = {"resched": "#1f77b4", "osmo-static": "#d62728", "nemo-budgets": "#2ca02c",
            "torchrun": "#9467bd", "young-daly": "#555555"}

Series = dict[str, list[tuple[float, float]]]


def interval_sweep(base: SimConfig, runner: Callable[[SimConfig], dict[str, Any]] = run) -> Series:
    young = young_daly(base)["young_interval_s"] or 3600.0
    blocking = base.mechanics.blocking_s
    series: Series = {name: [] for name in (*POLICIES, "young-daly")}
    for factor in INTERVAL_FACTORS:
        interval = young * factor + blocking
        for name in POLICIES:
            result = runner(replace(base, policy=name, checkpoint_interval_s=interval))
            series[name].append((interval, result["ettr"]))
        model = young_daly(base, interval)["ettr_at_interval"]
        series["young-daly"].append((interval, model if model is not None else math.nan))
    return series


def scale_sweep(base: SimConfig, runner: Callable[[SimConfig], dict[str, Any]] = run,
                scales: Sequence[int] = SCALES) -> Series:
    series: Series = {name: [] for name in (*POLICIES, "young-daly")}
    for gpus in scales:
        config = replace(base, gpus=gpus, checkpoint_interval_s=None)
        for name in POLICIES:
            series[name].append((gpus, runner(replace(config, policy=name))["ettr"]))
        optimum = young_daly(config)["ettr_optimal"]
        series["young-daly"].append((gpus, optimum if optimum is not None else math.nan))
    return series


def _svg(title: str, xlabel: str, series: Series, *, log_x: bool) -> str:
    width, height, left, right, top, bottom = 640, 360, 60, 150, 30, 45
    xs = [x for points in series.values() for x, _ in points]
    lo, hi = min(xs), max(xs)
    fx: Callable[[float], float] = (lambda v: math.log10(v)) if log_x else (lambda v: v)
    span = (fx(hi) - fx(lo)) or 1.0

    def px(x: float) -> float:
        return left + (fx(x) - fx(lo)) / span * (width - left - right)

    def py(y: float) -> float:
        return top + (1.0 - max(0.0, min(1.0, y))) * (height - top - bottom)

    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{html.escape(title)}">'),
             f'<text x="{left}" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = py(tick)
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" '
                     'stroke="#ddd"/>')
        parts.append(f'<text x="{left - 8}" y="{y + 4:.1f}" font-size="11" '
                     f'text-anchor="end">{tick:.2f}</text>')
    for x in sorted(set(xs)):
        label = f"{x / 1024:g}K" if not log_x or x < 1000 else f"{x / 1000:g}K"
        if not log_x:
            label = f"{x / 60:.0f} min"
        parts.append(f'<text x="{px(x):.1f}" y="{height - bottom + 16}" font-size="10" '
                     f'text-anchor="middle">{html.escape(label)}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 8}" font-size="12" '
                 f'text-anchor="middle">{html.escape(xlabel)}</text>')
    for index, (name, points) in enumerate(series.items()):
        colour = _COLOURS.get(name, "#000")
        dash = ' stroke-dasharray="5,4"' if name == "young-daly" else ""
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points if not math.isnan(y))
        parts.append(f'<polyline class="series" data-policy="{name}" fill="none" '
                     f'stroke="{colour}" stroke-width="2"{dash} points="{coords}"/>')
        ly = top + 16 * index
        parts.append(f'<line x1="{width - right + 10}" x2="{width - right + 30}" y1="{ly}" '
                     f'y2="{ly}" stroke="{colour}" stroke-width="2"{dash}/>')
        parts.append(f'<text x="{width - right + 35}" y="{ly + 4}" font-size="11">'
                     f'{html.escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def render(base: SimConfig, by_interval: Series, by_scale: Series) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td>"
        + "".join(f"<td>{y:.3f}</td>" for _, y in points) + "</tr>"
        for name, points in by_scale.items())
    heads = "".join(f"<th>{x:,.0f}</th>" for x, _ in next(iter(by_scale.values())))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>resched simulate</title>
<style>body{{font-family:sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}</style></head><body>
<h1>ETTR under failures: resched vs baselines</h1>
<p>{base.days:g} simulated days, seed {base.seed}, {base.gpus_per_node} GPUs per node,
blocking checkpoint {base.mechanics.blocking_s:g} s, restart {base.mechanics.restart_cost_s:g} s;
failure mix: Llama 3 405B (419 interruptions / 54 days / 16,384 GPUs).</p>
{_svg(f"ETTR vs checkpoint interval at {base.gpus:,} GPUs", "checkpoint interval", by_interval, log_x=False)}
{_svg("ETTR vs scale (Young's interval at each scale)", "GPUs", by_scale, log_x=True)}
<h2>ETTR by scale</h2><table><tr><th>policy</th>{heads}</tr>{rows}</table>
</body></html>
"""
