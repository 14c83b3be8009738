"""The lint data types and the context every rule reads.

A rule is a function ``rule(ctx) -> Iterable[Finding]``; it reads the validated spec
(``ctx.spec``), the rendered text and the source text, and never raises for a spec
that validated. Paths are YAML paths of the RENDERED workflow
(``workflow.groups[0].tasks[1]``); lines are lines of the SOURCE file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Protocol

import yaml

from workflows.lint.locate import LineMapper
from workflows.spec import Group, Task, Workflow
from workflows.spec_load import format_loc, line_map

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
TARGETS = ("osmo", "local", "slurm")
# libyaml's composer is ~10x faster and gives the same line marks.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class RenderedLike(Protocol):
    """What lint needs of :class:`workflows.render.Rendered`."""

    @property
    def source(self) -> Path | None: ...
    @property
    def source_text(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def workflow_line(self) -> int: ...


@dataclass(frozen=True)
class LintOptions:
    """``target``: where the workflow will run; the pool's retry limit and the time a
    checkpoint takes to write, when the user declares them."""

    target: str = "osmo"
    pool_retry_limit: int | None = None
    checkpoint_write_s: float | None = None


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    path: str
    message: str
    fix: str
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "path": self.path,
            "line": self.line,
            "message": self.message,
            "fix": self.fix,
        }

    def format(self, source: str) -> str:
        """``warning RS001 workflow.groups[0].tasks[1]: ... (train.yaml:31)`` + an indented fix."""
        where = f" ({source}:{self.line})" if self.line is not None else ""
        head = f"{self.severity:<7} {self.id} {self.path}: {self.message}{where}"
        return f"{head}\n        fix: {self.fix}" if self.fix else head


@dataclass(frozen=True)
class TaskSite:
    """One task as OSMO runs it: its YAML path and the group it belongs to."""

    path: str
    task: Task
    group: Group
    group_path: str  # for a flat task list, the task's own path (OSMO makes a group of it)
    grouped: bool  # False when the spec uses a flat `tasks:` list


def task_sites(spec: Workflow) -> tuple[TaskSite, ...]:
    if spec.groups is not None:
        return tuple(
            TaskSite(f"workflow.groups[{g}].tasks[{t}]", task, group, f"workflow.groups[{g}]", True)
            for g, group in enumerate(spec.groups)
            for t, task in enumerate(group.tasks)
        )
    groups = spec.task_groups()
    return tuple(
        TaskSite(f"workflow.tasks[{i}]", task, groups[i], f"workflow.tasks[{i}]", False)
        for i, task in enumerate(spec.tasks or ())
    )


@dataclass(frozen=True)
class LintContext:
    rendered: RenderedLike
    spec: Workflow
    options: LintOptions
    sites: tuple[TaskSite, ...] = field(init=False)
    # Results several rules share (e.g. the wrap calls of a task), computed once per lint.
    memo: dict[object, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sites", task_sites(self.spec))

    @property
    def base_dir(self) -> Path:
        """Relative ``localpath:`` entries resolve against the spec file's folder."""
        source = self.rendered.source
        return Path(source).parent if source is not None else Path.cwd()

    @cached_property
    def _mapper(self) -> LineMapper:
        r = self.rendered
        return LineMapper(r.text, r.source_text, r.workflow_line)

    @cached_property
    def _rendered_lines(self) -> dict[str, int]:
        try:
            node = yaml.compose(self.rendered.text, Loader=_LOADER)
        except yaml.YAMLError:
            return {}
        return {format_loc(loc): line for loc, line in line_map(node)} if node is not None else {}

    def line_of(self, path: str) -> int | None:
        """The source line of a YAML path (nearest known parent), through the rendered text."""
        lines = self._rendered_lines
        probe = path
        while probe:
            if probe in lines:
                return self._mapper.source_line(lines[probe])
            probe = _parent(probe)
        return None

    def finding(self, rule_id: str, severity: Severity, path: str, message: str, fix: str) -> Finding:
        return Finding(rule_id, severity, path, message, fix, self.line_of(path))

    def sites_in(self, group: Group) -> tuple[TaskSite, ...]:
        return self._sites_by_group.get(id(group), ())

    @cached_property
    def _sites_by_group(self) -> dict[int, tuple[TaskSite, ...]]:
        # one pass: asked once per task, a scan of every site made lint quadratic
        by_group: dict[int, list[TaskSite]] = {}
        for site in self.sites:
            by_group.setdefault(id(site.group), []).append(site)
        return {key: tuple(sites) for key, sites in by_group.items()}


Rule = Callable[[LintContext], Iterable[Finding]]


def _parent(path: str) -> str:
    cut = max(path.rfind("."), path.rfind("["))
    return path[:cut] if cut > 0 else ""


def source_line(text: str, offset: int) -> int:
    """1-based line number of character ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1
