"""The report's inline CSS and JavaScript (the file must work offline, with no fetch)."""

from __future__ import annotations

# Colours are part of the report's contract: the browser test finds the bars by them.
STATUS_COLOURS = {
    "COMPLETED": "#2e9d5b",
    "FAILED": "#d64545",
    "RESCHEDULED": "#e08a1e",
    "RESTARTING": "#c9a227",
    "CANCELED": "#8a8f98",
}
OTHER_STATUS_COLOUR = "#5b6b8c"
MARK_COLOURS = {
    "fault": "#c0262d",
    "detect": "#f07c00",
    "decision": "#7b4fbf",
    "restart": "#7b4fbf",
    "restore": "#138a4f",
    "upload": "#2f6fd6",
    "upload-failed": "#c0262d",
    "save": "#7d8590",
    "staged": "#1d9aa6",
}
LOST_COLOURS = {
    "useful_steps": "#2e9d5b",
    "startup": "#9aa5b8",
    "detection": "#f07c00",
    "restart_to_first_step": "#7b4fbf",
    "recomputed_lost_steps": "#d64545",
    "checkpoint_saves": "#2f6fd6",
    "other": "#c8ccd2",
}

CSS = """
:root { --fg: #1d2330; --muted: #5f6b7a; --line: #dfe3e8; --bg: #fafbfc; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 28px 40px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI",
       Roboto, "DejaVu Sans", sans-serif; color: var(--fg); background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 8px; }
.sub { color: var(--muted); margin: 0 0 14px; }
.status { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff; font-weight: 600;
          font-size: 12px; vertical-align: 2px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; min-width: 190px;
        background: var(--bg); flex: 1 1 190px; }
.card .v { font-size: 26px; font-weight: 700; }
.card .k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .n { color: var(--muted); font-size: 12px; }
.hint { margin: 8px 0 0; padding: 8px 12px; border-left: 4px solid #d64545; background: #fff5f5; }
svg text { font: 11px system-ui, "DejaVu Sans", sans-serif; fill: var(--fg); }
svg .axis line { stroke: var(--line); }
svg .axis text { fill: var(--muted); }
svg .lane-title { font-weight: 700; font-size: 13px; }
svg .progress { fill: none; stroke: #2e9d5b; stroke-width: 1.6; }
svg .recovery { fill: #d64545; fill-opacity: .10; }
svg .inplace { fill: none; stroke: #1d2330; stroke-opacity: .55; stroke-dasharray: 3 2; }
svg .mark line { stroke-width: 1.4; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; margin: 6px 0 10px; color: var(--muted);
          font-size: 12px; }
.legend label { cursor: pointer; user-select: none; }
.legend i { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px;
            vertical-align: -1px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px 4px 0; text-align: left;
         vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
#tip { position: fixed; pointer-events: none; background: #1d2330; color: #fff; padding: 6px 9px;
       border-radius: 6px; font-size: 12px; max-width: 460px; display: none; z-index: 10; }
#js-errors:empty { display: none; }
#js-errors { color: #c0262d; }
body.hide-upload .m-upload, body.hide-save .m-save, body.hide-staged .m-staged,
body.hide-detect .m-detect, body.hide-restore .m-restore, body.hide-decision .m-decision,
body.hide-restart .m-restart, body.hide-fault .m-fault { display: none; }
footer { margin-top: 28px; color: var(--muted); font-size: 12px; }
"""

# Tooltips, the mark filters, and the rendered box of every drawn element
# (``data-box``: x,y,w,h in CSS pixels) that tooltips anchor to and tests read back.
JS = """
(function () {
  var errors = document.getElementById('js-errors');
  window.addEventListener('error', function (e) {
    errors.textContent += 'script error: ' + e.message + '\\n';
  });
  var tip = document.getElementById('tip');
  function show(el, x, y) {
    tip.textContent = el.getAttribute('data-tip');
    tip.style.display = 'block';
    tip.style.left = Math.min(x + 12, window.innerWidth - tip.offsetWidth - 8) + 'px';
    tip.style.top = (y + 14) + 'px';
  }
  document.querySelectorAll('[data-tip]').forEach(function (el) {
    el.addEventListener('mousemove', function (e) { show(el, e.clientX, e.clientY); });
    el.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
    el.addEventListener('focus', function () {
      var b = el.getBoundingClientRect(); show(el, b.left, b.bottom);
    });
  });
  document.querySelectorAll('.legend input[data-hide]').forEach(function (box) {
    box.addEventListener('change', function () {
      document.body.classList.toggle('hide-' + box.getAttribute('data-hide'), !box.checked);
      measure();
    });
  });
  function measure() {
    document.querySelectorAll('[data-kind]').forEach(function (el) {
      var b = el.getBoundingClientRect();
      el.setAttribute('data-box', [b.left + window.scrollX, b.top + window.scrollY, b.width, b.height]
        .map(function (v) { return v.toFixed(1); }).join(','));
    });
  }
  measure();
  document.body.setAttribute('data-rendered', String(document.querySelectorAll('[data-box]').length));
})();
"""
