"""The local executor's dry run: a pure, typed plan of what ``resched run`` will do.

Everything the runtime needs is resolved here: group order, each task's argv and
environment with OSMO's runtime tokens substituted, its ``files:`` (``localpath:``
read, ``base64`` decoded), where its inputs are staged, its checkpoint timers and its
exitActions. ``materialize()`` prints it; the executor only follows it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

from workflows import osmo_runtime as rt
from workflows.backends.base import Request
from workflows.backends.taskfs import TaskFile, is_under_tmp
from workflows.errors import SpecError
from workflows.spec import Group, Task, Workflow

LOCAL_HOST = "127.0.0.1"
_INPUT_FIX = "use {{input:N}} with N < the number of inputs, or a task listed under inputs"


@dataclass(frozen=True)
class PlannedInput:
    """One ``inputs:`` entry (its OSMO rule): staged into ``dest`` when the task gets a new pod."""

    rule: rt.InputRule
    dest: Path

    @property
    def index(self) -> int:
        return self.rule.index

    @property
    def kind(self) -> rt.InputKind:
        return self.rule.kind

    @property
    def source(self) -> str:
        return self.rule.source

    @property
    def regex(self) -> str | None:
        return self.rule.regex


@dataclass(frozen=True)
class PlannedOutput:
    url: str
    regex: str | None


@dataclass(frozen=True)
class PlannedCheckpoint:
    """OSMO's ``checkpoint:`` timer: publish ``path`` to ``upload_url`` every period."""

    path: str
    upload_url: str  # url/<basename(path)>, as OSMO lays it out
    frequency_s: float
    regex: str | None


@dataclass(frozen=True)
class PlannedTask:
    name: str
    group: str
    lead: bool
    argv: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    files: tuple[TaskFile, ...]
    inputs: tuple[PlannedInput, ...]
    outputs: tuple[PlannedOutput, ...]
    checkpoints: tuple[PlannedCheckpoint, ...]
    exit_rules: rt.ExitRules  # parsed once, in YAML order (first match wins)
    task_dir: Path
    output_dir: Path

    def exit_action(self, code: int) -> rt.ExitAction | None:
        """OSMO: the first exitActions entry whose code list holds ``code``."""
        return self.exit_rules.match(code)


@dataclass(frozen=True)
class PlannedGroup:
    name: str
    ignore_nonlead_status: bool
    barrier: bool
    tasks: tuple[PlannedTask, ...]
    depends_on: tuple[str, ...]  # groups whose task outputs this group takes as inputs

    @property
    def lead(self) -> PlannedTask:
        return next(t for t in self.tasks if t.lead)


@dataclass(frozen=True)
class LocalOptions:
    """``resched run`` / ``submit --backend local`` options."""

    chaos: str | None = None
    max_retry_per_task: int = 3
    workdir: Path | None = None
    report: Path | None = None
    stop_grace_s: float = 20.0
    progress: str = "auto"  # auto | tty | plain | quiet


@dataclass(frozen=True)
class LocalPlan(Request):
    workflow_name: str
    run_id: str
    workdir: Path
    groups: tuple[PlannedGroup, ...]
    exec_timeout_s: float | None
    options: LocalOptions
    not_emulated: tuple[str, ...] = field(default=())
    token_map: tuple[tuple[str, str], ...] = field(default=())

    @property
    def tasks(self) -> tuple[PlannedTask, ...]:
        return tuple(t for g in self.groups for t in g.tasks)

    def materialize(self) -> str:
        lines = [f"local run {self.run_id} of workflow {self.workflow_name} in {self.workdir}"]
        lines.append(f"max_retry_per_task {self.options.max_retry_per_task}; "
                     f"exec_timeout {self.exec_timeout_s or 'none'}; chaos {self.options.chaos or 'none'}")
        for group in self.groups:
            after = f" after {', '.join(group.depends_on)}" if group.depends_on else ""
            lines.append(f"group {group.name}{after} (ignoreNonleadStatus "
                         f"{str(group.ignore_nonlead_status).lower()})")
            for task in group.tasks:
                lines += _describe_task(task)
        lines += [f"token {token} -> {value}" for token, value in self.token_map]
        lines += [f"note: {note}" for note in self.not_emulated]
        return "\n".join(lines) + "\n"

    def write(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        text, data = directory / "plan.txt", directory / "plan.json"
        text.write_text(self.materialize())
        data.write_text(json.dumps(asdict(self), default=_json_default, indent=2))
        return [text, data]


def _describe_task(task: PlannedTask) -> list[str]:
    role = "lead" if task.lead else "task"
    lines = [f"  {role} {task.name}: {' '.join(task.argv)}"]
    lines += [f"    env {key}={value}" for key, value in task.environment]
    lines += [f"    file {f.path} ({len(f.data)} bytes)" for f in task.files]
    lines += [f"    input {i.index}: {i.kind} {i.source} -> {i.dest}" for i in task.inputs]
    lines += [f"    output -> {o.url}" for o in task.outputs]
    lines += [f"    checkpoint {c.path} -> {c.upload_url} every {c.frequency_s:g}s"
              for c in task.checkpoints]
    lines += [f"    exitAction {rule}" for rule in task.exit_rules.describe()]
    return lines


def _json_default(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, Enum):
        return value.value
    raise TypeError(type(value).__name__)


def build_plan(
    spec: Workflow, options: LocalOptions, *, run_id: str, workdir: Path, base_dir: Path
) -> LocalPlan:
    """Pure: resolve ``spec`` into the plan the executor follows."""
    groups = spec.task_groups()
    dag = dag_of(spec)
    names = tuple(t.name for t in spec.all_tasks())
    planned = tuple(
        _plan_group(g, dag.upstream[g.name], names, run_id=run_id, workdir=workdir, base_dir=base_dir)
        for g in groups
    )
    notes = _not_emulated(spec)
    exec_timeout = spec.timeout.exec_timeout_s if spec.timeout else None
    tokens = (("{{host:*}}", LOCAL_HOST), ("{{workflow_id}}", run_id))
    return LocalPlan(
        workflow_name=spec.name,
        run_id=run_id,
        workdir=workdir,
        groups=tuple(next(p for p in planned if p.name == name) for name in dag.order()),
        exec_timeout_s=exec_timeout,
        options=options,
        not_emulated=notes,
        token_map=tokens,
    )


def _not_emulated(spec: Workflow) -> tuple[str, ...]:
    images = sorted({t.image for t in spec.all_tasks() if t.image})
    gpus = sorted({r.gpu for r in spec.resources.values() if r.gpu})
    notes = []
    if images:
        notes.append(f"image {', '.join(images)} is not used: tasks run on this machine's software")
    if gpus:
        notes.append("GPU, CPU and memory resources are not emulated: tasks share this machine")
    return tuple(notes)


def dag_of(spec: Workflow) -> rt.WorkflowDag:
    """The group DAG; a bad ``task:`` input is one SpecError naming its YAML path."""
    try:
        return rt.workflow_dag(spec)
    except rt.DagError as error:
        raise SpecError(str(error), where=error.path, fix=error.fix) from None


def _plan_group(
    group: Group, upstream: tuple[str, ...], names: tuple[str, ...], *, run_id: str, workdir: Path,
    base_dir: Path,
) -> PlannedGroup:
    tasks = tuple(_plan_task(t, group.name, names, run_id, workdir, base_dir) for t in group.tasks)
    return PlannedGroup(
        name=group.name,
        ignore_nonlead_status=group.ignoreNonleadStatus,
        barrier=group.barrier,
        tasks=tasks,
        depends_on=upstream,
    )


def task_dir_of(workdir: Path, task_name: str) -> Path:
    return workdir / "tasks" / task_name


def _plan_task(task: Task, group: str, names: tuple[str, ...], run_id: str, workdir: Path,
               base_dir: Path) -> PlannedTask:
    task_dir = task_dir_of(workdir, task.name)
    inputs = tuple(PlannedInput(rule, task_dir / "input" / str(rule.index))
                   for rule in rt.input_rules(task.inputs))
    where = f"task {task.name}"

    def resolve(token: rt.Token) -> str:
        if token.kind is rt.TokenKind.HOST and rt.host_task(token, names) is None:
            raise SpecError(f"{token.text} names no task of this workflow", where=where,
                            fix=f"use one of: {', '.join(names)}")
        return _token_value(token, inputs, run_id=run_id, task=task.name,
                            output_dir=task_dir / "output", where=where)

    def sub(text: str) -> str:
        return rt.substitute(text, resolve)

    return PlannedTask(
        name=task.name,
        group=group,
        lead=task.lead,
        argv=tuple(sub(a) for a in (*task.command, *task.args)),
        environment=tuple((k, sub(v)) for k, v in task.environment.items()),
        files=tuple(_plan_file(f, sub, base_dir, where) for f in task.files),
        inputs=inputs,
        outputs=tuple(PlannedOutput(url=o.url, regex=o.regex) for o in task.outputs),
        checkpoints=tuple(_plan_checkpoint(c, where) for c in task.checkpoint),
        exit_rules=rt.ExitRules.of(task.exit_action_ranges()),
        task_dir=task_dir,
        output_dir=task_dir / "output",
    )


def _plan_checkpoint(entry: object, where: str) -> PlannedCheckpoint:
    path, _url = entry.path, entry.url  # type: ignore[attr-defined]
    if not is_under_tmp(path):
        raise SpecError(
            f"checkpoint path {path} is outside /tmp; the local executor keeps a task's "
            "private files under its /tmp only",
            where=where,
            fix="checkpoint a directory under /tmp (e.g. /tmp/models)",
        )
    return PlannedCheckpoint(
        path=path,
        upload_url=rt.checkpoint_upload_url(entry.url, path),  # type: ignore[attr-defined]
        frequency_s=entry.frequency_s,  # type: ignore[attr-defined]
        regex=entry.regex,  # type: ignore[attr-defined]
    )


def read_localpath(base_dir: Path, localpath: str, where: str) -> bytes:
    """The client-side part of ``localpath:``: the local file's bytes (relative to the spec)."""
    source = base_dir / localpath
    try:
        return source.read_bytes()
    except OSError as error:
        raise SpecError(
            f"files: localpath {source} cannot be read ({error.strerror})",
            where=where,
            fix="give a path relative to the workflow file's folder",
        ) from None


def _plan_file(entry: object, sub: object, base_dir: Path, where: str) -> TaskFile:
    path: str = entry.path  # type: ignore[attr-defined]
    local = entry.localpath  # type: ignore[attr-defined]
    contents = rt.file_contents(
        path, contents=entry.contents, is_base64=bool(entry.base64),  # type: ignore[attr-defined]
        local_text=read_localpath(base_dir, local, f"{where} file {path}") if local is not None else None,
    )
    data = contents.data
    if contents.substitute_tokens:
        data = sub(data.decode("utf-8", errors="surrogateescape")).encode(  # type: ignore[operator]
            "utf-8", errors="surrogateescape")
    return TaskFile(path=path, data=data)


def _token_value(token: rt.Token, inputs: tuple[PlannedInput, ...], *, run_id: str, task: str,
                 output_dir: Path, where: str) -> str:
    """A token's local value: staged paths, this run's id, and 127.0.0.1 for every host."""
    if token.kind is rt.TokenKind.HOST:
        return LOCAL_HOST
    if token.kind is rt.TokenKind.WORKFLOW_ID:
        return run_id
    if token.kind is rt.TokenKind.UUID:  # OSMO: the task's uuid, the same for every retry
        return f"{run_id}-{task}"
    if token.kind is rt.TokenKind.OUTPUT:
        return str(output_dir)
    index = rt.input_token_key(token, [i.rule for i in inputs])
    if index is None:
        raise SpecError(
            f"{token.text} names no input of this task",
            where=where,
            fix=_INPUT_FIX,
        )
    return str(inputs[index].dest)


def substitute_tokens(text: str, values: Mapping[str, str], *, where: str) -> str:
    """Replace tokens from a ``{"input:0": ..., "output": ...}`` table (hosts -> 127.0.0.1)."""

    def one(token: rt.Token) -> str:
        if token.kind is rt.TokenKind.HOST:
            return LOCAL_HOST
        key = str(token.kind)
        if token.kind is rt.TokenKind.INPUT:
            key = "input:" + (token.argument if token.input_index is not None
                              else rt.normalize_name(token.argument))
        if key not in values:
            raise SpecError(f"{token.text} names no input of this task", where=where, fix=_INPUT_FIX)
        return values[key]

    return rt.substitute(text, one)
