"""Fault injection for ``resched run --chaos``: parse the spec, schedule, inject.

Spec: comma-separated items ``KIND:TASK[=CODE]@WHEN`` and/or one
``random:mtbf=30s[,seed=1][,kinds=kill+hang+term][,tasks=a+b][,max=N][,code=16]``.
WHEN is a duration after the run started (``20s``, ``1m``, ``500ms``, ``90``) or
``Nckpt`` (right after the run's N-th upload of a newer checkpoint step by a
``checkpoint:`` timer; uploads that carry no newer step do not count) or ``Nstep`` (as
soon as the run's training reports step N or later: its progress lines, or the step its
checkpoint folder names). Kinds, and what they do to
the target task's processes (the task's "workload" is everything below its
``resched wrap`` process, or the whole task when there is no wrapper):

``kill``     SIGKILL the workload (a crashed launcher/rank; the wrapper sees it die)
``podkill``  SIGKILL every process of the task (node loss: the task exits 137)
``hang``     SIGSTOP the workload's leaf processes (ranks stop making progress; only
             a hang detector or exec_timeout notices)
``exit``     one training rank exits with CODE: the executor preloads a tiny
             ``sitecustomize`` hook (chaos runs only) that exits with the code in a
             file on SIGUSR2, so the launcher and the wrapper see a real rank exit
             CODE and decide as they would. Without a Python leaf that has the hook,
             the whole task is killed and CODE is reported as its exit (the wrapper's
             decision is bypassed; the report says so).
``term``     SIGTERM to the task's top process, as Kubernetes preempts a pod (the
             wrapper hands it to the training as its --stop-signal, and checkpoints);
             SIGKILL after the stop grace.
``slow``     ``slow:TASK=FACTOR[@WHEN]``: the workload runs FACTOR times slower from WHEN
             (default: the start) until it exits (SIGSTOP / SIGCONT duty cycle, a
             throttled GPU or a slow node): NVRx's straggler detection flags its ranks.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from workflows.errors import UsageError
from workflows.spec import normalize_name
from wrapper.durations import DurationError, parse_duration

KINDS = ("kill", "podkill", "hang", "exit", "term", "slow")
DEFAULT_RANDOM_KINDS = ("kill", "hang", "term")
_ITEM = re.compile(r"^(?P<kind>[a-z]+):(?P<task>[^=@]+)(?:=(?P<code>[^@]*))?(?:@(?P<when>.+))?$")
_CKPT = re.compile(r"^(\d+)ckpt$")
_STEP = re.compile(r"^(\d+)steps?$")
_SYNTAX = ("write KIND:TASK@20s, KIND:TASK@3ckpt, KIND:TASK@500step, exit:TASK=16@50s or "
           "random:mtbf=30s,seed=1")


class ChaosError(UsageError):
    """A ``--chaos`` spec that cannot be used (names the bad item)."""


@dataclass(frozen=True)
class Fault:
    kind: str
    task: str
    at_s: float | None = None  # seconds after the run started
    after_ckpt: int | None = None  # right after the run's N-th checkpoint upload
    at_step: int | None = None  # once the run's training reports this step (or a later one)
    code: int | None = None  # exit only
    factor: float | None = None  # slow only: how many times slower

    def describe(self) -> str:
        code = f"={self.code}" if self.code is not None else ""
        if self.factor is not None:
            code = f"={self.factor:g}"
        if self.at_s is not None:
            when = f"{round(self.at_s, 1):g}s"
        elif self.at_step is not None:
            when = f"{self.at_step}step"
        else:
            when = f"{self.after_ckpt}ckpt"
        return f"{self.kind}:{self.task}{code}@{when}"


@dataclass(frozen=True)
class RandomChaos:
    mtbf_s: float
    seed: int = 0
    kinds: tuple[str, ...] = DEFAULT_RANDOM_KINDS
    tasks: tuple[str, ...] = ()  # empty: any task
    max_faults: int | None = None
    code: int = 16

    def next_fault(self, rng: random.Random, after_s: float, task_names: Sequence[str]) -> Fault:
        """The next fault, an exponential gap (mean ``mtbf_s``) after ``after_s``."""
        names = sorted(self.tasks or task_names)
        kind = rng.choice(self.kinds)
        return Fault(
            kind=kind,
            task=rng.choice(names),
            at_s=after_s + rng.expovariate(1.0 / self.mtbf_s),
            code=self.code if kind == "exit" else None,
        )


@dataclass(frozen=True)
class ChaosPlan:
    faults: tuple[Fault, ...] = ()
    random: RandomChaos | None = None

    @property
    def needs_exit_hook(self) -> bool:
        return any(f.kind == "exit" for f in self.faults) or bool(
            self.random and "exit" in self.random.kinds
        )


def parse_chaos(text: str | None, task_names: Sequence[str]) -> ChaosPlan:
    """Parse ``--chaos``; a bad item raises :class:`ChaosError` naming it."""
    if not text or not text.strip():
        return ChaosPlan()
    known = {normalize_name(n): n for n in task_names}
    faults: list[Fault] = []
    random_items: list[str] | None = None
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            raise ChaosError(f"--chaos {text!r} has an empty item", fix=_SYNTAX)
        if raw.startswith("random:"):
            if random_items is not None:
                raise ChaosError(f"--chaos item {raw!r}: random: is given twice", fix=_SYNTAX)
            random_items = [raw[len("random:") :]]
        elif random_items is not None and ":" not in raw and "=" in raw:
            random_items.append(raw)
        else:
            faults.append(_parse_fault(raw, known))
    plan_random = _parse_random(random_items, known) if random_items is not None else None
    return ChaosPlan(faults=tuple(faults), random=plan_random)


def _task(item: str, name: str, known: dict[str, str]) -> str:
    found = known.get(normalize_name(name.strip()))
    if found is None:
        raise ChaosError(
            f"--chaos item {item!r} names task {name!r}, which is not in the workflow",
            fix=f"use one of: {', '.join(sorted(known.values()))}",
        )
    return found


def _parse_fault(item: str, known: dict[str, str]) -> Fault:
    match = _ITEM.match(item)
    if match is None:
        raise ChaosError(f"--chaos item {item!r} is not KIND:TASK@WHEN", fix=_SYNTAX)
    kind = match.group("kind")
    if kind not in KINDS:
        raise ChaosError(
            f"--chaos item {item!r}: unknown kind {kind!r}", fix=f"use one of {', '.join(KINDS)}"
        )
    if kind == "slow":
        return _parse_slow(item, match, known)
    if match.group("when") is None:
        raise ChaosError(f"--chaos item {item!r} is not KIND:TASK@WHEN", fix=_SYNTAX)
    code = _parse_code(item, kind, match.group("code"))
    task = _task(item, match.group("task"), known)
    at_s, after_ckpt, at_step = _when(item, match.group("when"))
    return Fault(kind=kind, task=task, at_s=at_s, after_ckpt=after_ckpt, at_step=at_step, code=code)


def _parse_slow(item: str, match: re.Match[str], known: dict[str, str]) -> Fault:
    text = (match.group("code") or "").strip()
    try:
        factor = float(text)
    except ValueError:
        factor = 0.0
    if not 1.0 < factor <= 100.0:
        raise ChaosError(f"--chaos item {item!r}: slow needs a FACTOR above 1 (at most 100)",
                         fix="write e.g. slow:worker_1=4 or slow:worker_1=4@30s")
    task = _task(item, match.group("task"), known)
    at_s, after_ckpt, at_step = _when(item, match.group("when") or "0s")
    return Fault(kind="slow", task=task, at_s=at_s, after_ckpt=after_ckpt, at_step=at_step,
                 factor=factor)


def _when(item: str, text: str) -> tuple[float | None, int | None, int | None]:
    """The trigger of one item: (seconds, checkpoint count, step), one of them set."""
    when = text.strip()
    for pattern, what in ((_CKPT, "checkpoints"), (_STEP, "steps")):
        found = pattern.match(when)
        if found:
            count = int(found.group(1))
            if count < 1:
                raise ChaosError(f"--chaos item {item!r}: count {what} from 1", fix=_SYNTAX)
            return (None, count, None) if pattern is _CKPT else (None, None, count)
    return _duration(item, when), None, None


def _parse_code(item: str, kind: str, text: str | None) -> int | None:
    if kind != "exit":
        if text is not None:
            raise ChaosError(f"--chaos item {item!r}: only exit takes =CODE", fix=_SYNTAX)
        return None
    if text is None or not text.strip().isdigit() or not 0 < int(text) <= 255:
        raise ChaosError(
            f"--chaos item {item!r}: exit needs a code 1-255", fix="write e.g. exit:master=16@50s"
        )
    return int(text)


def _duration(item: str, text: str) -> float:
    try:
        return parse_duration(text)
    except DurationError:
        raise ChaosError(
            f"--chaos item {item!r}: {text!r} is not a time, a checkpoint count or a step",
            fix="write e.g. @20s, @1m, @500ms, @3ckpt or @500step",
        ) from None


def _parse_random(items: list[str], known: dict[str, str]) -> RandomChaos:
    item = "random:" + ",".join(items)
    params: dict[str, str] = {}
    for part in items:
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in ("mtbf", "seed", "kinds", "tasks", "max", "code"):
            raise ChaosError(
                f"--chaos item {item!r}: {part!r} is not one of mtbf=, seed=, kinds=, tasks=, "
                "max=, code=",
                fix="write e.g. random:mtbf=30s,seed=1,kinds=kill+hang+term",
            )
        params[key.strip()] = value.strip()
    if "mtbf" not in params:
        raise ChaosError(f"--chaos item {item!r} needs mtbf=", fix="write e.g. random:mtbf=30s")
    mtbf = _duration(item, params["mtbf"])
    if mtbf <= 0:
        raise ChaosError(f"--chaos item {item!r}: mtbf must be > 0", fix="write e.g. mtbf=30s")
    kinds = tuple(k for k in params.get("kinds", "+".join(DEFAULT_RANDOM_KINDS)).split("+") if k)
    bad = [k for k in kinds if k not in KINDS or k == "slow"]  # slow needs its FACTOR
    if bad or not kinds:
        raise ChaosError(f"--chaos item {item!r}: unknown kind {bad[0] if bad else ''!r}",
                         fix=f"join kinds from {', '.join(KINDS)} with +")
    tasks = tuple(_task(item, t, known) for t in params.get("tasks", "").split("+") if t)
    return RandomChaos(
        mtbf_s=mtbf,
        seed=_int(item, params.get("seed", "0")),
        kinds=kinds,
        tasks=tasks,
        max_faults=_int(item, params["max"]) if "max" in params else None,
        code=_parse_code(item, "exit", params.get("code", "16")) or 16,
    )


def _int(item: str, text: str) -> int:
    if not text.isdigit():
        raise ChaosError(f"--chaos item {item!r}: {text!r} is not a whole number", fix=_SYNTAX)
    return int(text)
