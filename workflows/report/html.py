"""One self-contained HTML file for a run: ETTR summary, lost time, a timeline per task.

Everything is inline (CSS, SVG drawn here, a small script for tooltips and filters):
the file opens offline and can be attached to a ticket. Every text from the run (task
names, fault specs, rule ids) is escaped: a task may be called ``<script>``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from workflows.backends.local.ettr import LOST_PARTS, largest_loss
from workflows.backends.local.report import duration_text
from workflows.report.assets import (
    CSS,
    JS,
    LOST_COLOURS,
    MARK_COLOURS,
    OTHER_STATUS_COLOUR,
    STATUS_COLOURS,
)
from workflows.report.view import Lane, Mark, Span, build_lanes

GENERATOR = "resched report"  # the <meta name="generator"> that marks files we wrote

WIDTH, LEFT, RIGHT = 1100, 140, 24
PLOT = WIDTH - LEFT - RIGHT
PROGRESS_H, BAR_H, LABEL_ROW_H, LABEL_ROWS = 46, 20, 13, 3
LANE_H = 22 + PROGRESS_H + 8 + BAR_H + 6 + LABEL_ROWS * LABEL_ROW_H + 12
_LABELLED = ("fault", "decision", "restore", "upload", "staged", "upload-failed")
_MARK_NAMES = {"fault": "fault injected", "detect": "failure detected", "decision": "decision",
               "restart": "restart", "restore": "checkpoint restored", "upload": "checkpoint uploaded",
               "save": "checkpoint saved", "staged": "inputs staged"}


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def render_html(report: Mapping[str, Any]) -> str:
    """The whole document for ``report`` (a run report with recomputed metrics)."""
    wall = max(float(report["ended_at"]) - float(report["started_at"]), 1e-3)
    lanes = build_lanes(report)
    status = str(report.get("status"))
    colour = STATUS_COLOURS.get(status, OTHER_STATUS_COLOUR)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta name="generator" content="{GENERATOR}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>resched run {esc(report.get('run_id'))}</title>",
        f"<style>{CSS}</style></head><body>",
        (f"<h1>{esc(report.get('workflow'))} <span class=\"status\" style=\"background:{colour}\">"
        f"{esc(status)}</span></h1>"),
        f"<p class=\"sub\">run {esc(report.get('run_id'))} · {duration_text(wall)} · "
        f"{esc(report.get('summary', ''))}"
        + (f"<br>reason: {esc(report['reason'])}" if report.get("reason") else "") + "</p>",
        _summary_cards(report),
        "<h2>Where the time went</h2>",
        _lost_time(report, wall),
        "<h2>Timeline</h2>",
        _legend(),
        _timeline_svg(lanes, wall),
        "<h2>Faults</h2>",
        _faults_table(report),
        "<h2>Attempts</h2>",
        _attempts_table(report),
        f"<footer>workdir {esc(report.get('workdir', ''))}"
        + (f" · final checksum {esc(report['final_checksum'])}" if report.get("final_checksum") else "")
        + "</footer>",
        '<div id="tip" role="tooltip"></div><pre id="js-errors"></pre>',
        f"<script>{JS}</script></body></html>",
    ]
    return "\n".join(parts) + "\n"


# -- summary -------------------------------------------------------------------------
def _card(key: str, value: str, note: str, kind: str) -> str:
    return (f'<div class="card" data-card="{kind}"><div class="k">{esc(key)}</div>'
            f'<div class="v">{esc(value)}</div><div class="n">{note}</div></div>')


def _num(value: Any, fmt: str = "{:.2f}") -> str:
    return fmt.format(value) if isinstance(value, (int, float)) else "–"


def _summary_cards(report: Mapping[str, Any]) -> str:
    m = report["metrics"]
    base = report.get("baseline")
    cards = [_card("ETTR measured", _num(m.get("ettr")),
                   f"useful {_num(m.get('useful_s'), '{:.1f}')} s of {_num(m.get('wall_s'), '{:.1f}')} s wall",
                   "ettr")]
    if base:
        cards.append(_card("fault-free run (upper bound)", _num(base.get("ettr_fault_free")),
                           f"this run reaches {_num(base.get('ettr_vs_fault_free'), '{:.0%}')} of it; "
                           f"faults cost {_num(base.get('cost_of_faults_s'), '{:.1f}')} s "
                           f"(run {esc(base.get('baseline_run_id'))})", "baseline"))
    else:
        cards.append(_card("fault-free run (upper bound)", "not measured",
                           "run the same command without <code>--chaos</code>, then "
                           "<code>resched report RUN_DIR --baseline FAULT_FREE_RUN_DIR</code>", "baseline"))
    if m.get("ettr_model_optimal") is not None:
        used = (f"{_num(m.get('ettr_model_used'))} at the interval used "
                f"({_num(m.get('checkpoint_interval_s'), '{:.1f}')} s); "
                if m.get("ettr_model_used") is not None else "")
        cards.append(_card("Young/Daly model", _num(m.get("ettr_model_optimal")),
                           f"{used}optimum {_num(m.get('tau_opt_s'), '{:.1f}')} s at MTBF "
                           f"{_num(m.get('mtbf_s'), '{:.1f}')} s, checkpoint "
                           f"{_num(m.get('checkpoint_cost_s'), '{:.3f}')} s. A model, not a bound"
                           + ("; faults are too frequent for it here (MTBF &lt; 10 x (interval + D + R))."
                              if m.get("model_in_range") is False else "."),
                           "model"))
    cards.append(_card("faults", str(m.get("faults", 0)),
                       f"detection {_num(m.get('detection_s'), '{:.1f}')} s, resume "
                       f"{_num(m.get('resume_s'), '{:.1f}')} s (means), lost {m.get('lost_steps', 0)} steps",
                       "faults"))
    return '<div class="cards">' + "".join(cards) + "</div>"


def _lost_time(report: Mapping[str, Any], wall: float) -> str:
    breakdown: Mapping[str, float | None] = report.get("time_breakdown") or {}
    width, height = PLOT + LEFT, 26
    x, rects, legend = 0.0, [], []
    for key in ("useful_steps", "startup", "detection", "restart_to_first_step",
                "recomputed_lost_steps", "checkpoint_saves", "other"):
        seconds = breakdown.get(key) or 0.0
        label = "useful steps" if key == "useful_steps" else LOST_PARTS[key][0]
        legend.append(f'<span><i style="background:{LOST_COLOURS[key]}"></i>{esc(label)} '
                      f"{seconds:.1f} s ({seconds / wall:.0%})</span>")
        if seconds <= 0:
            continue
        w = seconds / wall * width
        tip = f"{label}: {seconds:.2f} s, {seconds / wall:.1%} of the wall time"
        rects.append(f'<rect data-kind="lost-part" data-part="{key}" data-seconds="{seconds:.3f}" '
                     f'x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" fill="{LOST_COLOURS[key]}" '
                     f'data-tip="{esc(tip)}"><title>{esc(tip)}</title></rect>')
        x += w
    worst = largest_loss(breakdown)
    hint = (f'<p class="hint" data-hint="{worst[0]}">Largest loss: <b>{esc(LOST_PARTS[worst[0]][0])}</b> '
            f"({worst[1]:.1f} s). {esc(LOST_PARTS[worst[0]][1])}.</p>") if worst else ""
    return (f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="wall time split">{"".join(rects)}</svg>'
            f'<div class="legend">{"".join(legend)}</div>{hint}')


# -- timeline ------------------------------------------------------------------------
def _legend() -> str:
    items = []
    for kind, name in _MARK_NAMES.items():
        items.append(f'<label><input type="checkbox" data-hide="{kind}" checked>'
                     f'<i style="background:{MARK_COLOURS[kind]}"></i>{esc(name)}</label>')
    spans = "".join(f'<span><i style="background:{c}"></i>attempt {s.lower()}</span>'
                    for s, c in STATUS_COLOURS.items())
    return f'<div class="legend">{"".join(items)}</div><div class="legend">{spans}</div>'


def _tick_step(wall: float) -> float:
    for step in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600):
        if wall / step <= 12:
            return step
    return 10 ** math.ceil(math.log10(wall / 10))


def _timeline_svg(lanes: Sequence[Lane], wall: float) -> str:
    height = 24 + LANE_H * max(1, len(lanes))

    def x(t: float) -> float:
        return LEFT + max(0.0, min(t, wall)) / wall * PLOT

    out = [(f'<svg id="timeline" data-kind="timeline" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
           f'role="img" aria-label="timeline per task" data-wall="{wall:.3f}" data-left="{LEFT}" '
           f'data-plot="{PLOT}"><g class="axis">')]
    step = _tick_step(wall)
    t = 0.0
    while t <= wall + 1e-9:
        out.append(f'<line x1="{x(t):.1f}" y1="16" x2="{x(t):.1f}" y2="{height}"/>'
                   f'<text x="{x(t):.1f}" y="12" text-anchor="middle">{duration_text(t)}</text>')
        t += step
    out.append("</g>")
    if not lanes:
        out.append(f'<text x="{LEFT}" y="50">no task ran</text>')
    for index, lane in enumerate(lanes):
        out.append(_lane_svg(lane, 24 + index * LANE_H, x))
    out.append("</svg>")
    return "".join(out)


def _lane_svg(lane: Lane, top: float, x: Callable[[float], float]) -> str:
    name = esc(lane.task)
    prog_top = top + 22
    bar_top = prog_top + PROGRESS_H + 8
    out = [f'<g class="lane" data-kind="lane" data-task="{name}">',
           f'<text class="lane-title" x="8" y="{top + 14}">{name}</text>',
           f'<text x="8" y="{prog_top + 12}" fill="#5f6b7a">steps</text>',
           f'<text x="8" y="{bar_top + 14}" fill="#5f6b7a">attempts</text>']
    for span in lane.spans:
        if span.kind == "recovery":
            out.append(_span_rect(span, x, prog_top, bar_top + BAR_H - prog_top, "recovery", lane.task))
    out.append(_progress(lane, prog_top, x))
    for span in lane.spans:
        if span.kind == "attempt":
            fill = STATUS_COLOURS.get(span.status, OTHER_STATUS_COLOUR)
            out.append(_span_rect(span, x, bar_top, BAR_H, "attempt", lane.task, fill=fill))
    for span in lane.spans:
        if span.kind == "inplace":
            out.append(_span_rect(span, x, bar_top + 2, BAR_H - 4, "inplace", lane.task))
    out.extend(_marks(lane.marks, x, prog_top, bar_top, lane.task))
    out.append("</g>")
    return "".join(out)


def _span_rect(span: Span, x: Callable[[float], float], top: float, height: float, css: str, task: str,
               fill: str | None = None) -> str:
    left, right = x(span.start), x(span.end)
    paint = f' fill="{fill}"' if fill else ""
    return (f'<rect class="{css}" data-kind="{span.kind}" data-task="{esc(task)}" data-status="{esc(span.status)}" '
            f'data-start="{span.start:.3f}" data-end="{span.end:.3f}" x="{left:.2f}" y="{top:.1f}" '
            f'width="{max(1.0, right - left):.2f}" height="{height:.1f}" rx="3"{paint} '
            f'data-tip="{esc(span.tip)}"><title>{esc(span.tip)}</title></rect>')


def _progress(lane: Lane, top: float, x: Callable[[float], float]) -> str:
    if not lane.steps:
        return ""
    highest = max(step for _, step in lane.steps) or 1
    segments: list[list[str]] = [[]]
    previous = None
    for t, step in lane.steps:
        if previous is not None and step <= previous:
            segments.append([])  # restored from a checkpoint: the line drops, a new one starts
        segments[-1].append(f"{x(t):.1f},{top + PROGRESS_H - step / highest * PROGRESS_H:.1f}")
        previous = step
    lines = "".join(f'<polyline class="progress" points="{" ".join(points)}"/>'
                    for points in segments if points)
    tip = f"{lane.task}: steps {lane.steps[0][1]}..{lane.steps[-1][1]} (highest {highest})"
    return (f'<g data-kind="progress" data-task="{esc(lane.task)}" data-highest="{highest}" '
            f'data-tip="{esc(tip)}">{lines}<text x="{LEFT - 6}" y="{top + 10}" text-anchor="end" '
            f'fill="#5f6b7a">{highest}</text></g>')


def _marks(marks: Sequence[Mark], x: Callable[[float], float], prog_top: float, bar_top: float, task: str) -> list[str]:
    out = []
    row_ends = [-1e9] * LABEL_ROWS
    label_top = bar_top + BAR_H + 6
    last_label: dict[str, str] = {}
    for mark in marks:
        colour = MARK_COLOURS.get(mark.kind, "#333")
        px = x(mark.t)
        top = prog_top if mark.kind in ("fault", "detect", "decision", "restart", "restore") else bar_top - 4
        parts = [f'<line x1="{px:.1f}" y1="{top:.1f}" x2="{px:.1f}" y2="{bar_top + BAR_H:.1f}" stroke="{colour}"/>',
                 _symbol(mark.kind, px, top, colour)]
        label = ""
        # a label only where it says something new (an unchanged re-upload repeats its step,
        # the wrapper and the training both report one restore)
        if mark.kind in _LABELLED and (mark.kind not in ("upload", "restore") or last_label.get(mark.kind) != mark.label):
            last_label[mark.kind] = mark.label
            width = 6.2 * len(mark.label) + 6
            start = min(px, LEFT + PLOT - width)  # keep the text inside the plot at the right edge
            row = next((r for r in range(LABEL_ROWS) if row_ends[r] < start), None)
            if row is not None:
                row_ends[row] = start + width
                label = (f'<text class="m-{mark.kind}" x="{start:.1f}" '
                         f'y="{label_top + (row + 1) * LABEL_ROW_H - 3:.1f}" fill="{colour}">{esc(mark.label)}</text>')
        # the label stays outside the group: the group's box is the mark itself, at its time
        out.append(f'<g class="mark m-{mark.kind}" data-kind="{mark.kind}" data-task="{esc(task)}" '
                   f'data-t="{mark.t:.3f}" data-label="{esc(mark.label)}" tabindex="0" '
                   f'data-tip="{esc(mark.tip)}"><title>{esc(mark.tip)}</title>{"".join(parts)}</g>{label}')
    return out


def _symbol(kind: str, px: float, top: float, colour: str) -> str:
    if kind == "fault":  # a downward triangle: something hit here
        return f'<path d="M{px - 6:.1f},{top - 1:.1f} L{px + 6:.1f},{top - 1:.1f} L{px:.1f},{top + 9:.1f} Z" fill="{colour}"/>'
    if kind == "restore":
        return f'<path d="M{px - 5:.1f},{top + 8:.1f} L{px + 5:.1f},{top + 8:.1f} L{px:.1f},{top:.1f} Z" fill="{colour}"/>'
    if kind == "decision":
        return (f'<path d="M{px:.1f},{top:.1f} L{px + 5:.1f},{top + 5:.1f} L{px:.1f},{top + 10:.1f} '
                f'L{px - 5:.1f},{top + 5:.1f} Z" fill="{colour}"/>')
    if kind in ("upload", "upload-failed", "staged"):
        return f'<rect x="{px - 3.5:.1f}" y="{top - 3.5:.1f}" width="7" height="7" fill="{colour}"/>'
    if kind == "save":
        return ""
    return f'<circle cx="{px:.1f}" cy="{top + 4:.1f}" r="4" fill="{colour}"/>'


# -- tables --------------------------------------------------------------------------
def _faults_table(report: Mapping[str, Any]) -> str:
    faults = report.get("faults") or []
    if not faults:
        return "<p>No fault was injected.</p>"
    rows = []
    for f in faults:
        rows.append(
            f'<tr data-fault="{esc(f.get("spec"))}"><td>{esc(f.get("spec"))}</td><td>{esc(f.get("task"))}</td>'
            f'<td class="num">{_num(f.get("detection_s"), "{:.2f}")}</td>'
            f'<td class="num">{_num(f.get("resume_s"), "{:.2f}")}</td>'
            f'<td class="num">{esc(f.get("lost_steps", "–"))}</td>'
            f"<td>{_steps_of(f)}</td>"
            f"<td>{esc(f.get('decision') or '?')}</td><td>{esc(f.get('rule') or '')}</td>"
            f"<td>{'interrupted by the next fault' if f.get('interrupted') else ''}</td></tr>")
    return ("<table><tr><th>fault</th><th>task</th><th>detection s</th><th>resume s</th>"
            "<th>lost steps</th><th>step → restored</th><th>decision</th><th>rule</th><th></th></tr>"
            + "".join(rows) + "</table>")


def _steps_of(fault: Mapping[str, Any]) -> str:
    if fault.get("step_before") is None:
        return "before the first step"
    restored = fault.get("restored_step")
    return f"{esc(fault['step_before'])} → {esc(restored if restored is not None else '?')}"


def _attempts_table(report: Mapping[str, Any]) -> str:
    t0 = float(report["started_at"])
    rows = []
    for a in report.get("attempts") or []:
        wrapper = a.get("wrapper") or {}
        said = " ".join(str(v) for v in (wrapper.get("decision"), wrapper.get("rule")) if v)
        uploads = a.get("checkpoints_uploaded") or []
        rows.append(
            f"<tr><td>{esc(a.get('task'))}</td><td class=\"num\">{esc(a.get('attempt'))}</td>"
            f"<td class=\"num\">{esc(a.get('retry_id'))}</td>"
            f"<td class=\"num\">{float(a['started_at']) - t0:.1f}</td>"
            f"<td class=\"num\">{float(a['ended_at']) - t0:.1f}</td>"
            f"<td class=\"num\">{esc(a.get('exit_code'))}</td><td>{esc(a.get('action') or '-')}</td>"
            f"<td>{esc(a.get('status'))}</td><td>{esc(said or '-')}</td>"
            f"<td>{esc(a.get('resumed_from_step') if a.get('resumed_from_step') is not None else '-')}</td>"
            f"<td>{esc(', '.join(str(u) for u in uploads) or '-')}</td></tr>")
    return ("<table><tr><th>task</th><th>attempt</th><th>pod</th><th>start s</th><th>end s</th>"
            "<th>exit</th><th>action</th><th>status</th><th>wrapper</th><th>resumed from</th>"
            "<th>uploads (step)</th></tr>" + "".join(rows) + "</table>")
