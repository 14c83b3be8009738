"""Rules on exitActions: retry limit, overlaps, risky and impossible reschedule codes."""

from __future__ import annotations

from collections.abc import Iterator

from workflows.lint.codes import (
    MAX_PROCESS_CODE,
    OSMO_CODES,
    RESCHEDULE_COLLISIONS,
    SIGNAL_CODES,
    SIGNAL_NOTES,
    contains,
    format_intervals,
    intersect,
    intervals,
    merge,
    signal_name,
    subtract,
)
from workflows.lint.core import Finding, LintContext, TaskSite

_NO_LIMIT = 10**100  # code lists have no upper bound in OSMO's syntax


def _reschedule_sites(ctx: LintContext) -> list[TaskSite]:
    return [s for s in ctx.sites if "RESCHEDULE" in s.task.exitActions]


def rs004_pool_retry_limit(ctx: LintContext) -> Iterator[Finding]:
    """OSMO skips RESCHEDULE while retry_id >= the pool's max_retry_per_task (default 0)."""
    sites = _reschedule_sites(ctx)
    limit = ctx.options.pool_retry_limit
    if ctx.options.target != "osmo" or not sites or (limit is not None and limit > 0):
        return
    path = f"{sites[0].path}.exitActions.RESCHEDULE"
    if limit == 0:
        yield ctx.finding(
            "RS004", "warning", path,
            "RESCHEDULE will never fire: the pool's max_retry_per_task is 0, so OSMO ends the "
            "task as FAILED (\"No exit action applied due to retry limit 0\")",
            "ask the pool's admin for max_retry_per_task > 0, or use a pool that has one",
        )
        return
    yield ctx.finding(
        "RS004", "info", path,
        "exitActions RESCHEDULE is skipped by OSMO unless the pool's max_retry_per_task > 0 "
        "(an admin setting that defaults to 0)",
        "check the pool's limit and declare it with --pool-retry-limit N to silence this",
    )


def rs005_overlapping_actions(ctx: LintContext) -> Iterator[Finding]:
    """OSMO does not validate overlaps: the first action listed wins, silently."""
    for site in ctx.sites:
        actions = [(a, intervals(r)) for a, r in site.task.exit_action_ranges()]
        for i, (first, first_codes) in enumerate(actions):
            for later, later_codes in actions[i + 1 :]:
                both = intersect(first_codes, later_codes)
                if not both:
                    continue
                codes = format_intervals(both)
                yield ctx.finding(
                    "RS005", "warning", f"{site.path}.exitActions.{later}",
                    f"exit code(s) {codes} of task {site.task.name} are under both {first} and "
                    f"{later}; OSMO takes the first match, so {first} wins and {later} never "
                    f"sees them",
                    f"remove {codes} from {first} or from {later}, so each code has one action",
                )


def rs006_risky_reschedule_codes(ctx: LintContext) -> Iterator[Finding]:
    """A reschedule code that also means something else (success, launcher, Megatron, signals)."""
    for site in _reschedule_sites(ctx):
        codes = intervals(site.task.codes_for("RESCHEDULE"))
        path = f"{site.path}.exitActions.RESCHEDULE"
        for code, collision in RESCHEDULE_COLLISIONS.items():
            if contains(codes, code):
                yield ctx.finding(
                    "RS006", collision.severity, path,
                    f"task {site.task.name} reschedules on exit {code}: {collision.why}",
                    collision.fix,
                )
        yield from _signal_codes(ctx, site, codes, path)


def _signal_codes(
    ctx: LintContext, site: TaskSite, codes: list[tuple[int, int]], path: str
) -> Iterator[Finding]:
    hits = [c for low, high in intersect(codes, [SIGNAL_CODES]) for c in range(low, high + 1)]
    noted = [c for c in hits if c in SIGNAL_NOTES]
    crashes = [c for c in hits if c not in SIGNAL_NOTES]
    for code in noted:
        yield ctx.finding(
            "RS006", "info", path,
            f"task {site.task.name} reschedules on exit {SIGNAL_NOTES[code]}",
            "keep it only if you mean it; `resched wrap` detects hangs and preemption itself "
            "and exits with a dedicated reschedule code",
        )
    if crashes:
        shown = ", ".join(f"{c} {signal_name(c)}" for c in crashes[:4])
        more = f" and {len(crashes) - 4} more" if len(crashes) > 4 else ""
        yield ctx.finding(
            "RS006", "warning", path,
            f"task {site.task.name} reschedules on signal exit codes ({shown}{more}): a process "
            "killed by such a signal crashed, which a new node rarely fixes",
            f"remove {format_intervals(merge((c, c) for c in crashes))} from RESCHEDULE, or "
            "run the training under `resched wrap` and reschedule on its code",
        )


def rs007_impossible_codes(ctx: LintContext) -> Iterator[Finding]:
    """Codes above 255 that are not OSMO's own: no process can exit with them."""
    osmo = [(low, high) for low, high, _ in OSMO_CODES]
    for site in ctx.sites:
        for action, ranges in site.task.exit_action_ranges():
            above = subtract(
                intersect(intervals(ranges), [(MAX_PROCESS_CODE + 1, _NO_LIMIT)]), osmo
            )
            if not above:
                continue
            codes = format_intervals(above)
            # A code written on its own above 255 is a mistake; a range that runs past 255
            # (4-300) is sloppy but still matches its lower part.
            listed = any(
                r.low > MAX_PROCESS_CODE and subtract([(r.low, r.high)], osmo) for r in ranges
            )
            yield ctx.finding(
                "RS007", "error" if listed else "warning",
                f"{site.path}.exitActions.{action}",
                f"{action} code(s) {codes} of task {site.task.name} can never match: a process "
                f"exits with 0-255 (exit({above[0][0]}) arrives as {above[0][0] % 256}), and "
                "they are not OSMO's own codes (256-257, 2002-2040, 3000-3006, 4000)",
                "use a code from 0 to 255 (and the same code in the script that exits with it)",
            )


def rs017_failures_marked_complete(ctx: LintContext) -> Iterator[Finding]:
    """COMPLETE on a crash code makes a failed training count as success."""
    crash_codes = [(1, 1), SIGNAL_CODES]
    for site in ctx.sites:
        complete = intervals(site.task.codes_for("COMPLETE"))
        crashes = intersect(complete, crash_codes)
        if not crashes:
            continue
        codes = format_intervals(crashes)
        yield ctx.finding(
            "RS017", "warning", f"{site.path}.exitActions.COMPLETE",
            f"task {site.task.name} ends COMPLETED on exit {codes}: Python, the launchers "
            "(1) and processes killed by a signal (129-192) exit with these, so a crashed "
            "training would count as a success and nothing retries or reschedules it",
            f"remove {codes} from COMPLETE; to finish early on purpose, exit 0 (or a dedicated "
            "code) from the training",
        )


RULES = (
    rs004_pool_retry_limit,
    rs005_overlapping_actions,
    rs006_risky_reschedule_codes,
    rs007_impossible_codes,
    rs017_failures_marked_complete,
)
