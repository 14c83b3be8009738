"""Pitfalls of NVRx in-process restart (``nvidia_resiliency_ext.inprocess.Wrapper``).

Read from the task's command, its ``files:`` contents and its Python localpath files
(the training script is where the Wrapper is configured):

  RS040 warning  the collective timeout is not under the Wrapper's soft_timeout: a rank
                 blocked on a dead peer (gloo is not aborted by the Wrapper) waits for the
                 collective timeout, so the Wrapper's hard timeout kills it instead of
                 restarting it in place; or resched wrap's --hang-timeout is shorter than
                 one restart (hard_timeout + barrier_timeout) and kills the restart itself
  RS041 warning  the Wrapper's store needs MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE,
                 and neither a launcher (torchrun, ft_launcher) nor the task sets them

Defaults are NVRx 0.4.1's (``inprocess/wrap.py``): soft 60 s, hard 90 s, barrier 120 s;
PyTorch's process-group timeouts: gloo 30 min, NCCL 10 min.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from workflows.lint.core import Finding, LintContext, TaskSite
from workflows.lint.wrap_scan import task_texts

_WRAPPER = re.compile(r"\binprocess\.Wrapper\b|from\s+nvidia_resiliency_ext\.inprocess\s+import[^\n]*\bWrapper\b")
_TIMEDELTA = r"(?:datetime\.)?timedelta\(\s*(?:seconds\s*=\s*)?([0-9.]+)\s*\)"
_DEFAULTS = {"soft_timeout": 60.0, "hard_timeout": 90.0, "barrier_timeout": 120.0}
_PG_DEFAULT = {"gloo": 1800.0, "nccl": 600.0}
_PG_CALL = re.compile(r"init_process_group\((?P<args>[^)]*(?:\([^)]*\)[^)]*)*)\)", re.DOTALL)
_LAUNCHERS = re.compile(r"\b(?:torchrun|ft_launcher|torch\.distributed\.run)\b")
_STORE_ENV = ("MASTER_ADDR", "MASTER_PORT")
_HANG = re.compile(r"--hang-timeout(?:=|\s+)['\"]?([0-9.]+)(s|m|h)?\b")
_UNITS = {None: 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_MAX_FILE = 2 * 1024 * 1024


def _seconds(text: str, name: str) -> float | None:
    match = re.search(rf"\b{name}\s*=\s*{_TIMEDELTA}", text)
    return float(match.group(1)) if match else None


def _collective_timeout(text: str) -> tuple[float, str] | None:
    """(seconds, how it was found) of the first init_process_group call, if any."""
    match = _PG_CALL.search(text)
    if match is None:
        return None
    args = match.group("args")
    given = re.search(rf"\btimeout\s*=\s*{_TIMEDELTA}", args)
    if given:
        return float(given.group(1)), "its init_process_group timeout"
    if re.search(r"\btimeout\s*=", args):
        return None  # set from a variable: cannot be judged here
    backend = "nccl" if "nccl" in args.lower() else "gloo"
    return _PG_DEFAULT[backend], f"PyTorch's default {backend} timeout (none given)"


def _wrapper_sites(ctx: LintContext) -> Iterator[tuple[TaskSite, str, str, str]]:
    """(site, YAML path of the Wrapper's file, that text, all of the task's text)."""
    for site in ctx.sites:
        texts = task_texts(site, ctx.base_dir, max_bytes=_MAX_FILE)
        everything = "\n".join(text for _, text in texts)
        for where, text in texts:
            if _WRAPPER.search(text):
                yield site, where, text, everything
                break


def rs040_inprocess_timeouts(ctx: LintContext) -> Iterator[Finding]:
    for site, where, text, everything in _wrapper_sites(ctx):
        limits = {name: _seconds(text, name) or default for name, default in _DEFAULTS.items()}
        collective = _collective_timeout(text)
        if collective is not None and collective[0] >= limits["soft_timeout"]:
            yield ctx.finding(
                "RS040", "warning", where,
                f"task {site.task.name}: the collective timeout ({collective[0]:g} s, "
                f"{collective[1]}) is not under the in-process Wrapper's soft_timeout "
                f"({limits['soft_timeout']:g} s): a rank waiting on a failed peer stays "
                "blocked, and the Wrapper kills it (hard_timeout) instead of restarting in place",
                "pass init_process_group(timeout=timedelta(seconds=N)) with N well under "
                "soft_timeout (the example uses 5 s)",
            )
        restart = limits["hard_timeout"] + limits["barrier_timeout"]
        for match in _HANG.finditer(everything):
            hang = float(match.group(1)) * _UNITS[match.group(2)]
            if hang < restart:
                yield ctx.finding(
                    "RS040", "warning", where,
                    f"task {site.task.name}: resched wrap --hang-timeout {hang:g} s is shorter "
                    f"than one in-process restart may take (hard_timeout {limits['hard_timeout']:g}"
                    f" s + barrier_timeout {limits['barrier_timeout']:g} s): resched could kill "
                    "the task while the Wrapper restarts it",
                    f"use --hang-timeout {restart:g} or more (or auto), or shorten the Wrapper's "
                    "timeouts",
                )
                break


def rs041_inprocess_environment(ctx: LintContext) -> Iterator[Finding]:
    for site, where, _text, everything in _wrapper_sites(ctx):
        if _LAUNCHERS.search(everything):
            continue  # torchrun / ft_launcher set MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
        missing = [name for name in _STORE_ENV
                   if name not in site.task.environment and not re.search(rf"\b{name}=", everything)]
        if missing:
            yield ctx.finding(
                "RS041", "warning", where,
                f"task {site.task.name} uses nvidia_resiliency_ext.inprocess.Wrapper without a "
                f"launcher, and {', '.join(missing)} is not set: its TCPStore cannot start "
                "(it also needs RANK and WORLD_SIZE)",
                "start the training with torchrun / ft_launcher, or set MASTER_ADDR, "
                "MASTER_PORT, RANK and WORLD_SIZE in the task's environment",
            )


RULES = (rs040_inprocess_timeouts, rs041_inprocess_environment)
