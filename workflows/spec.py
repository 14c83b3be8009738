"""Frozen pydantic models of OSMO's workflow spec, version 2.

Attribute names are OSMO's keys exactly (``exitActions``, ``ignoreNonleadStatus``), so a
spec reads the same in YAML and in code. ``extra="forbid"`` everywhere, as on OSMO's
server; scalars are coerced to strings where OSMO's field is a string. Validation
errors are turned into one line naming the YAML path and line by
:mod:`workflows.spec_errors`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from wrapper.durations import DurationError, parse_duration

NAME_PATTERN = re.compile(r"^[a-zA-Z]([a-zA-Z0-9_-]*[a-zA-Z0-9])?$")
RESERVED_TASK_NAMES = frozenset({"osmo-ctrl"})
MAX_LABELS = 16
OSMO_URL_SCHEMES = ("s3", "gs", "swift", "tos", "azure")
LOCAL_URL_SCHEMES = ("file",)
EXIT_ACTIONS = ("COMPLETE", "FAIL", "RESCHEDULE")
_CODE_LIST = re.compile(r"^(\d+(-\d+)?)+(,\d+(-\d+)?)*$")
_URL = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*)://")

ExitAction = Literal["COMPLETE", "FAIL", "RESCHEDULE"]


def _scalar_to_str(value: Any) -> Any:
    """OSMO coerces ints, floats and bools to strings where a field is a string."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        return str(value)
    return value


Str = Annotated[str, BeforeValidator(_scalar_to_str)]


def _check_duration(value: Any) -> Any:
    """Pydantic wants ValueError; keep the duration parser's one-line message and fix."""
    if isinstance(value, bool):
        raise ValueError("a duration cannot be a boolean; write seconds or e.g. 5m")
    try:
        parse_duration(value)
    except DurationError as error:
        raise ValueError(str(error)) from None
    return value


def normalize_name(name: str) -> str:
    """OSMO compares names case-insensitively with ``-`` and ``_`` treated as equal."""
    return name.lower().replace("_", "-")


def _check_name(kind: str, name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise ValueError(
            f"{kind} name {name!r} is not valid: use letters, digits, '-' and '_', "
            "starting with a letter and ending with a letter or digit"
        )
    return name


def url_scheme(url: str) -> str | None:
    """The scheme of ``url`` (``s3``), or None for a plain path."""
    match = _URL.match(url)
    return match.group("scheme").lower() if match else None


def _check_url(url: str) -> str:
    scheme = url_scheme(url)
    if scheme is not None and scheme not in OSMO_URL_SCHEMES + LOCAL_URL_SCHEMES:
        raise ValueError(
            f"url scheme {scheme!r} is not supported: OSMO takes "
            + ", ".join(f"{s}://" for s in OSMO_URL_SCHEMES)
            + "; the local and Slurm backends also take file:// and plain paths"
        )
    if not url.strip():
        raise ValueError("url is empty")
    return url


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CodeRange(_Model):
    low: int
    high: int

    def __contains__(self, code: object) -> bool:
        return isinstance(code, int) and self.low <= code <= self.high


def parse_code_list(text: str) -> tuple[CodeRange, ...]:
    """Parse OSMO's code-list syntax ``0,1-10,16`` (no spaces) into ranges."""
    if not _CODE_LIST.match(text):
        raise ValueError(
            f"exit code list {text!r} is not valid: write codes and ranges separated by "
            "commas without spaces, e.g. 3 or 1-10,16"
        )
    ranges = []
    for item in text.split(","):
        low, _, high = item.partition("-")
        if "-" in high:
            raise ValueError(f"exit code range {item!r} in {text!r} has more than one '-'")
        low_i, high_i = int(low), int(high or low)
        if low_i > high_i:
            raise ValueError(f"exit code range {item!r} runs backwards; write {high_i}-{low_i}")
        ranges.append(CodeRange(low=low_i, high=high_i))
    return tuple(ranges)


class File(_Model):
    path: Str
    contents: Str | None = None
    base64: bool = False
    localpath: Str | None = None

    @field_validator("path")
    @classmethod
    def _path(cls, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"file path {path!r} must be absolute (start with '/')")
        if path == "/osmo" or path.startswith("/osmo/"):
            raise ValueError(f"file path {path!r} is under /osmo, which OSMO reserves")
        return path

    @model_validator(mode="after")
    def _one_source(self) -> File:
        if (self.contents is None) == (self.localpath is None):
            raise ValueError(f"file {self.path!r} needs exactly one of contents or localpath")
        return self


class Input(_Model):
    task: Str | None = None
    url: Str | None = None
    regex: Str | None = None

    @model_validator(mode="before")
    @classmethod
    def _dataset_removed(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "dataset" in data:
            raise ValueError("dataset inputs were removed from OSMO in 2026; use url: instead")
        return data

    @model_validator(mode="after")
    def _one_source(self) -> Input:
        if (self.task is None) == (self.url is None):
            raise ValueError("an input needs exactly one of task or url")
        if self.url is not None:
            _check_url(self.url)
        return self


class Output(_Model):
    url: Str
    regex: Str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return _check_url(url)


class Checkpoint(_Model):
    path: Str
    url: Str
    frequency: int | float | str
    regex: Str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return _check_url(url)

    @field_validator("frequency", mode="before")  # before: pydantic would turn true into 1
    @classmethod
    def _frequency(cls, value: int | float | str) -> int | float | str:
        return _check_duration(value)

    @property
    def frequency_s(self) -> float:
        return parse_duration(self.frequency)

    @property
    def upload_url(self) -> str:
        """Where OSMO's runtime writes this directory: ``url/<basename(path)>``."""
        return self.url.rstrip("/") + "/" + self.path.rstrip("/").rsplit("/", 1)[-1]


class Task(_Model):
    name: Str
    image: Str | None = None
    command: tuple[Str, ...] = Field(min_length=1)
    args: tuple[Str, ...] = ()
    environment: dict[str, Str] = Field(default_factory=dict)
    files: tuple[File, ...] = ()
    inputs: tuple[Input, ...] = ()
    outputs: tuple[Output, ...] = ()
    credentials: dict[str, Str | dict[str, Str]] = Field(default_factory=dict)
    lead: bool = False
    privileged: bool = False
    hostNetwork: bool = False
    volumeMounts: tuple[Str, ...] = ()
    exitActions: dict[str, Str] = Field(default_factory=dict)
    checkpoint: tuple[Checkpoint, ...] = ()
    resource: Str = "default"
    downloadType: Literal["download"] | None = None
    cacheSize: Str | None = None
    kpis: tuple[dict[str, Str], ...] = ()
    backend: Str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if normalize_name(name) in RESERVED_TASK_NAMES:
            raise ValueError(f"task name {name!r} is reserved by OSMO")
        return _check_name("task", name)

    @field_validator("exitActions", mode="before")
    @classmethod
    def _exit_actions(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        normalized: dict[str, Any] = {}
        for action, codes in value.items():
            key = str(action).upper()
            if key not in EXIT_ACTIONS:
                hint = " (OSMO's docs show RESTART but its server rejects it)" if key == "RESTART" else ""
                raise ValueError(
                    f"exit action {action!r} is not one of {', '.join(EXIT_ACTIONS)}{hint}"
                )
            if key in normalized:
                raise ValueError(f"exit action {key} is given twice")
            # Every scalar becomes a string first, so that 3.5 or true fail the syntax check
            # here instead of passing as "3.5" / "True" (which parse_code_list rejects later).
            text = _scalar_to_str(codes)
            if isinstance(text, str):
                parse_code_list(text)
            normalized[key] = text
        return normalized

    @model_validator(mode="after")
    def _unique_file_paths(self) -> Task:
        seen: set[str] = set()
        for file in self.files:
            if file.path in seen:
                raise ValueError(f"file path {file.path!r} appears twice in task {self.name!r}")
            seen.add(file.path)
        return self

    def exit_action_ranges(self) -> tuple[tuple[ExitAction, tuple[CodeRange, ...]], ...]:
        """The task's exitActions in YAML order (OSMO matches the first)."""
        return tuple((action, parse_code_list(codes)) for action, codes in self.exitActions.items())  # type: ignore[misc]

    def exit_action(self, code: int) -> ExitAction | None:
        """The first action whose code list contains ``code`` (None: OSMO's default applies)."""
        for action, ranges in self.exit_action_ranges():
            if any(code in r for r in ranges):
                return action
        return None

    def codes_for(self, action: ExitAction) -> tuple[CodeRange, ...]:
        codes = self.exitActions.get(action)
        return parse_code_list(codes) if codes is not None else ()


class Group(_Model):
    name: Str
    barrier: bool = True
    ignoreNonleadStatus: bool = True
    tasks: tuple[Task, ...] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return _check_name("group", name)

    @model_validator(mode="before")
    @classmethod
    def _single_task_is_lead(cls, data: Any) -> Any:
        # OSMO makes the only task of a group its lead.
        if isinstance(data, Mapping):
            tasks = data.get("tasks")
            if isinstance(tasks, list) and len(tasks) == 1 and isinstance(tasks[0], Mapping):
                if "lead" not in tasks[0]:
                    data = {**data, "tasks": [{**tasks[0], "lead": True}]}
        return data

    @model_validator(mode="after")
    def _exactly_one_lead(self) -> Group:
        leads = [t.name for t in self.tasks if t.lead]
        if len(leads) != 1:
            found = f"{len(leads)} ({', '.join(leads)})" if leads else "none"
            raise ValueError(
                f"group {self.name!r} must have exactly one task with lead: true, found {found}"
            )
        return self

    @property
    def lead_task(self) -> Task:
        return next(t for t in self.tasks if t.lead)


class Resource(_Model):
    cpu: int | None = None
    gpu: int | None = None
    memory: Str | None = None
    storage: Str | None = None
    platform: Str | None = None
    nodesExcluded: tuple[Str, ...] = ()
    topology: Any = None  # shape is pool-specific; passed through untouched


class Timeout(_Model):
    exec_timeout: int | float | str | None = None
    queue_timeout: int | float | str | None = None

    @field_validator("exec_timeout", "queue_timeout", mode="before")
    @classmethod
    def _duration(cls, value: int | float | str | None) -> int | float | str | None:
        return value if value is None else _check_duration(value)

    @property
    def exec_timeout_s(self) -> float | None:
        return None if self.exec_timeout is None else parse_duration(self.exec_timeout)

    @property
    def queue_timeout_s(self) -> float | None:
        return None if self.queue_timeout is None else parse_duration(self.queue_timeout)


class Workflow(_Model):
    name: Str
    labels: dict[str, Str] = Field(default_factory=dict)
    pool: Str | None = None
    resources: dict[str, Resource] = Field(default_factory=dict)
    timeout: Timeout | None = None
    groups: tuple[Group, ...] | None = None
    tasks: tuple[Task, ...] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return _check_name("workflow", name)

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        if len(labels) > MAX_LABELS:
            raise ValueError(f"{len(labels)} labels given; OSMO allows at most {MAX_LABELS}")
        return labels

    @model_validator(mode="after")
    def _structure(self) -> Workflow:
        if (self.groups is None) == (self.tasks is None):
            raise ValueError("a workflow needs exactly one of groups or tasks")
        if self.tasks is not None and not self.tasks:
            raise ValueError("tasks is empty; a workflow needs at least one task")
        if self.groups is not None and not self.groups:
            raise ValueError("groups is empty; a workflow needs at least one group")
        self._check_unique_names()
        self._check_references()
        return self

    def _check_unique_names(self) -> None:
        for kind, names in (  # tasks first: flat tasks' groups are named after them
            ("task", [t.name for t in self.all_tasks()]),
            ("group", [g.name for g in self.task_groups()]),
        ):
            seen: dict[str, str] = {}
            for name in names:
                key = normalize_name(name)
                if key in seen:
                    raise ValueError(
                        f"{kind} names {seen[key]!r} and {name!r} collide (OSMO compares names "
                        "case-insensitively with '-' and '_' equal); rename one"
                    )
                seen[key] = name

    def _check_references(self) -> None:
        tasks = {normalize_name(t.name) for t in self.all_tasks()}
        for task in self.all_tasks():
            if self.resources and task.resource not in self.resources:
                raise ValueError(
                    f"task {task.name!r} uses resource {task.resource!r}, which is not under "
                    f"workflow.resources ({', '.join(self.resources)})"
                )
            for item in task.inputs:
                ref = item.task
                if ref is not None and ":" not in ref and normalize_name(ref) not in tasks:
                    raise ValueError(f"task {task.name!r} takes an input from unknown task {ref!r}")

    def task_groups(self) -> tuple[Group, ...]:
        """Groups as OSMO runs them: a flat task list becomes one group per task."""
        if self.groups is not None:
            return self.groups
        return tuple(
            Group(name=f"{t.name}-group", tasks=(t.model_copy(update={"lead": True}),))
            for t in self.tasks or ()
        )

    def all_tasks(self) -> tuple[Task, ...]:
        if self.tasks is not None:
            return self.tasks
        return tuple(t for g in self.groups or () for t in g.tasks)

    def group_of(self, task_name: str) -> Group:
        key = normalize_name(task_name)
        for group in self.task_groups():
            if any(normalize_name(t.name) == key for t in group.tasks):
                return group
        raise KeyError(task_name)


class WorkflowDocument(_Model):
    """The rendered text OSMO returns holds only the ``workflow`` section."""

    workflow: Workflow
