"""The local executor's dry run: a pure, typed plan of what ``resched run`` will do.

Everything the runtime needs is resolved here: group order, each task's argv and
environment with OSMO's runtime tokens substituted, its ``files:`` (``localpath:``
read, ``base64`` decoded), where its inputs are staged, its checkpoint timers and its
exitActions. ``materialize()`` prints it; the executor only follows it.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workflows.backends.base import Request
from workflows.backends.taskfs import TaskFile, is_under_tmp
from workflows.errors import SpecError
from workflows.spec import Group, Task, Workflow, normalize_name, parse_code_list

LOCAL_HOST = "127.0.0.1"
_TOKEN = re.compile(r"{{(uuid|workflow_id|output|input:[^}]+|host:[^}]+)}}")


@dataclass(frozen=True)
class PlannedInput:
    """One ``inputs:`` entry: staged into ``dest`` when the task gets a (new) pod."""

    index: int
    kind: str  # "url" | "task"
    source: str  # the url, or the producing task's name
    regex: str | None
    dest: Path


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
    exit_actions: tuple[tuple[str, str], ...]  # (action, code list) in YAML order
    task_dir: Path
    output_dir: Path

    def exit_action(self, code: int) -> str | None:
        """OSMO: the first exitActions entry whose code list holds ``code``."""
        for action, codes in self.exit_actions:
            if any(code in r for r in parse_code_list(codes)):
                return action
        return None


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
    lines += [f"    exitAction {action}: {codes}" for action, codes in task.exit_actions]
    return lines


def _json_default(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    raise TypeError(type(value).__name__)


def build_plan(
    spec: Workflow, options: LocalOptions, *, run_id: str, workdir: Path, base_dir: Path
) -> LocalPlan:
    """Pure: resolve ``spec`` into the plan the executor follows."""
    groups = spec.task_groups()
    owner = {normalize_name(t.name): g.name for g in groups for t in g.tasks}
    planned = tuple(
        _plan_group(g, owner, run_id=run_id, workdir=workdir, base_dir=base_dir) for g in groups
    )
    notes = _not_emulated(spec)
    exec_timeout = spec.timeout.exec_timeout_s if spec.timeout else None
    tokens = (("{{host:*}}", LOCAL_HOST), ("{{workflow_id}}", run_id))
    return LocalPlan(
        workflow_name=spec.name,
        run_id=run_id,
        workdir=workdir,
        groups=_dependency_order(planned),
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


def _dependency_order(groups: tuple[PlannedGroup, ...]) -> tuple[PlannedGroup, ...]:
    """Spec order, except that a group runs after the groups it takes task inputs from."""
    done: list[PlannedGroup] = []
    pending = list(groups)
    while pending:
        ready = next((g for g in pending if set(g.depends_on) <= {d.name for d in done}), None)
        if ready is None:
            cycle = ", ".join(g.name for g in pending)
            raise SpecError(f"groups {cycle} take task inputs from each other in a cycle",
                            fix="make the data flow between groups one-directional")
        done.append(ready)
        pending.remove(ready)
    return tuple(done)


def _plan_group(
    group: Group, owner: Mapping[str, str], *, run_id: str, workdir: Path, base_dir: Path
) -> PlannedGroup:
    tasks = tuple(_plan_task(t, group.name, run_id, workdir, base_dir) for t in group.tasks)
    deps = {
        owner[normalize_name(i.source.split(":")[-1])]
        for t in tasks
        for i in t.inputs
        if i.kind == "task"
    } - {group.name}
    return PlannedGroup(
        name=group.name,
        ignore_nonlead_status=group.ignoreNonleadStatus,
        barrier=group.barrier,
        tasks=tasks,
        depends_on=tuple(sorted(deps)),
    )


def task_dir_of(workdir: Path, task_name: str) -> Path:
    return workdir / "tasks" / task_name


def _plan_task(task: Task, group: str, run_id: str, workdir: Path, base_dir: Path) -> PlannedTask:
    task_dir = task_dir_of(workdir, task.name)
    inputs = tuple(
        PlannedInput(
            index=n,
            kind="task" if item.task is not None else "url",
            source=(item.task if item.task is not None else item.url) or "",
            regex=item.regex,
            dest=task_dir / "input" / str(n),
        )
        for n, item in enumerate(task.inputs)
    )
    values = _token_values(task, inputs, run_id, task_dir / "output")
    where = f"task {task.name}"

    def sub(text: str) -> str:
        return substitute_tokens(text, values, where=where)

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
        exit_actions=tuple(task.exitActions.items()),
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
        upload_url=entry.upload_url,  # type: ignore[attr-defined]
        frequency_s=entry.frequency_s,  # type: ignore[attr-defined]
        regex=entry.regex,  # type: ignore[attr-defined]
    )


def _plan_file(entry: object, sub: object, base_dir: Path, where: str) -> TaskFile:
    path: str = entry.path  # type: ignore[attr-defined]
    if entry.localpath is not None:  # type: ignore[attr-defined]
        source = base_dir / entry.localpath  # type: ignore[attr-defined]
        try:
            text = source.read_text()
        except OSError as error:
            raise SpecError(
                f"files: localpath {source} cannot be read ({error.strerror})",
                where=f"{where} file {path}",
                fix="give a path relative to the workflow file's folder",
            ) from None
        data = sub(text).encode()  # type: ignore[operator]
    elif entry.base64:  # type: ignore[attr-defined]
        data = base64.b64decode(entry.contents or "")  # type: ignore[attr-defined]
    else:
        data = sub(entry.contents or "").encode()  # type: ignore[attr-defined, operator]
    return TaskFile(path=path, data=data)


def _token_values(
    task: Task, inputs: tuple[PlannedInput, ...], run_id: str, output_dir: Path
) -> dict[str, str]:
    values = {"workflow_id": run_id, "uuid": run_id, "output": str(output_dir)}
    for item in inputs:
        values[f"input:{item.index}"] = str(item.dest)
        if item.kind == "task":
            values.setdefault(f"input:{normalize_name(item.source.split(':')[-1])}", str(item.dest))
    return values


def substitute_tokens(text: str, values: Mapping[str, str], *, where: str) -> str:
    """Replace OSMO's runtime tokens as OSMO does when it builds the pod."""

    def one(match: re.Match[str]) -> str:
        token = match.group(1)
        if token.startswith("host:"):
            return LOCAL_HOST
        key = token
        if token.startswith("input:") and not token[6:].isdigit():
            key = "input:" + normalize_name(token[6:])
        if key not in values:
            raise SpecError(
                f"{{{{{token}}}}} names no input of this task",
                where=where,
                fix="use {{input:N}} with N < the number of inputs, or a task listed under inputs",
            )
        return values[key]

    return _TOKEN.sub(one, text)
