"""OSMO's runtime rules, pure: no processes, no I/O, standard library only.

Every backend (local executor, Slurm, OSMO) takes its runtime behaviour from here so
that they cannot drift: runtime tokens and their substitution, exitActions matched on
code ranges parsed once, the checkpoint timer's schedule, ``files:`` contents, input
staging rules, a group's reaction to one task's end, and the workflow DAG that
``inputs: - task: NAME`` builds between groups. Facts: reference
osmo-workflow-semantics.md sections 2-6.

Kept free of pydantic and of the spec models (they are passed in duck-typed) because
the Slurm in-job helper imports it at every job start.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

# ---------------------------------------------------------------------------- tokens
#: OSMO's protected runtime tokens (section 2): no spaces allowed inside the braces.
TOKEN = re.compile(r"\{\{(uuid|workflow_id|output|input:[^}]+|host:[^}]+)\}\}")


class TokenKind(str, Enum):
    UUID = "uuid"
    WORKFLOW_ID = "workflow_id"
    OUTPUT = "output"
    INPUT = "input"
    HOST = "host"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Token:
    """One runtime token: ``{{input:2}}`` is (INPUT, "2")."""

    kind: TokenKind
    argument: str = ""  # the input index or task name, the host's task name

    @property
    def text(self) -> str:
        return "{{" + (f"{self.kind}:{self.argument}" if self.argument else str(self.kind)) + "}}"

    @property
    def input_index(self) -> int | None:
        """``{{input:N}}`` -> N; ``{{input:task}}`` -> None."""
        return int(self.argument) if self.kind is TokenKind.INPUT and self.argument.isdigit() else None


def parse_token(inner: str) -> Token:
    """The text between the braces of a :data:`TOKEN` match."""
    kind, _, argument = inner.partition(":")
    return Token(TokenKind(kind), argument)


def tokens_in(text: str) -> tuple[Token, ...]:
    return tuple(parse_token(m.group(1)) for m in TOKEN.finditer(text))


def substitute(text: str, resolve: Callable[[Token], str]) -> str:
    """Replace every runtime token by ``resolve(token)`` (OSMO does it when it builds the pod)."""
    return TOKEN.sub(lambda m: resolve(parse_token(m.group(1))), text)


def host_task(token: Token, task_names: Iterable[str]) -> str | None:
    """The task ``{{host:T}}`` names, as spelled in the spec; None: no such task."""
    wanted = normalize_name(token.argument)
    return next((t for t in task_names if normalize_name(t) == wanted), None)


def normalize_name(name: str) -> str:
    """OSMO compares names case-insensitively with ``-`` and ``_`` treated as equal."""
    return name.lower().replace("_", "-")


def env_suffix(task_name: str) -> str:
    """``worker-1`` -> ``WORKER_1``: a task name as part of a shell variable name."""
    return normalize_name(task_name).replace("-", "_").upper()


# ---------------------------------------------------------------------- exitActions
class ExitAction(str, Enum):
    COMPLETE = "COMPLETE"
    FAIL = "FAIL"
    RESCHEDULE = "RESCHEDULE"

    def __str__(self) -> str:
        return self.value


class _Range(Protocol):
    low: int
    high: int


@dataclass(frozen=True)
class CodeRange:
    low: int
    high: int

    def __contains__(self, code: object) -> bool:
        return isinstance(code, int) and self.low <= code <= self.high


@dataclass(frozen=True)
class ExitRule:
    action: ExitAction
    ranges: tuple[CodeRange, ...]

    def matches(self, code: int) -> bool:
        return any(code in r for r in self.ranges)


@dataclass(frozen=True)
class ExitRules:
    """A task's exitActions, parsed once, in YAML order (OSMO takes the first match)."""

    rules: tuple[ExitRule, ...] = ()

    @classmethod
    def of(cls, ranges: Iterable[tuple[str, Iterable[_Range]]]) -> ExitRules:
        """From ``Task.exit_action_ranges()`` (action name, parsed ranges) pairs."""
        return cls(tuple(
            ExitRule(ExitAction(str(action).upper()), tuple(CodeRange(r.low, r.high) for r in rs))
            for action, rs in ranges
        ))

    def match(self, code: int) -> ExitAction | None:
        """The first rule holding ``code``; None: OSMO's default (0 complete, else fail)."""
        return next((rule.action for rule in self.rules if rule.matches(code)), None)

    def describe(self) -> tuple[str, ...]:
        return tuple(
            f"{rule.action}: " + ",".join(
                str(r.low) if r.low == r.high else f"{r.low}-{r.high}" for r in rule.ranges)
            for rule in self.rules
        )


def default_action(code: int) -> ExitAction:
    return ExitAction.COMPLETE if code == 0 else ExitAction.FAIL


@dataclass(frozen=True)
class ExitDecision:
    """What OSMO does with a task's exit code."""

    action: ExitAction
    matched: ExitAction | None  # the exitActions entry that matched (None: the default rule)
    note: str = ""  # why a RESCHEDULE was not applied


def exit_decision(rules: ExitRules, code: int, *, retry_id: int, max_retry_per_task: int) -> ExitDecision:
    """First matching entry; RESCHEDULE is skipped once ``retry_id >= max_retry_per_task``."""
    matched = rules.match(code)
    note = ""
    if matched is ExitAction.RESCHEDULE and retry_id >= max_retry_per_task:
        note = (
            f"RESCHEDULE for exit {code} skipped: retry limit {max_retry_per_task} reached "
            f"(retry_id {retry_id}; set --max-retry-per-task). Note: OSMO's default pool "
            "max_retry_per_task is 0, so there RESCHEDULE is skipped unless the pool sets it"
        )
        matched = None
    return ExitDecision(action=matched or default_action(code), matched=matched, note=note)


# ---------------------------------------------------------------------------- groups
class TaskStatus(str, Enum):
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    RESCHEDULED = "RESCHEDULED"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Reaction:
    """How one task's exit moves its group (section 6)."""

    task_status: TaskStatus
    new_pod: bool = False  # the task runs again in a new pod (inputs downloaded again)
    restart_others: bool = False  # every other task is stopped and run again in place
    group_status: TaskStatus | None = None  # the group ends now with this status
    reason: str = ""


def group_reaction(*, is_lead: bool, action: ExitAction | str, ignore_nonlead_status: bool) -> Reaction:
    action = ExitAction(action)
    if action is ExitAction.RESCHEDULE:
        if is_lead:
            return Reaction(TaskStatus.RESCHEDULED, new_pod=True, restart_others=True,
                            reason="lead rescheduled: every other task restarts")
        if ignore_nonlead_status:
            return Reaction(TaskStatus.RESCHEDULED, new_pod=True,
                            reason="non-lead rescheduled alone (ignoreNonleadStatus: true)")
        return Reaction(TaskStatus.RESCHEDULED, new_pod=True, restart_others=True,
                        reason="non-lead rescheduled: barrier reset, every task restarts "
                        "(ignoreNonleadStatus: false)")
    status = TaskStatus.COMPLETED if action is ExitAction.COMPLETE else TaskStatus.FAILED
    if is_lead:
        return Reaction(status, group_status=status,
                        reason=f"lead {status.value.lower()}: the other tasks take its status")
    if status is TaskStatus.FAILED and not ignore_nonlead_status:
        return Reaction(status, group_status=TaskStatus.FAILED,
                        reason="non-lead failed: the group fails (ignoreNonleadStatus: false)")
    if status is TaskStatus.FAILED:
        return Reaction(status, reason="non-lead failure ignored (ignoreNonleadStatus: true)")
    return Reaction(status, reason="non-lead completed")


# ------------------------------------------------------------------ checkpoint timer
@dataclass(frozen=True)
class CheckpointSchedule:
    """OSMO's checkpoint timer (section 4), as times; the caller owns the clock.

    One period after the command started, then one period after the previous upload
    ENDED (a slow upload pushes the next one back, they never overlap), and one final
    upload after the command exited, whatever its exit code.
    """

    period_s: float
    final_upload_after_exit: bool = True  # OSMO: "upload the data one more time"

    def first_due(self, started_at: float) -> float:
        return started_at + self.period_s

    def next_due(self, previous_upload_ended_at: float) -> float:
        return previous_upload_ended_at + self.period_s


def checkpoint_upload_url(url: str, path: str) -> str:
    """A directory lands under its own base name: ``/tmp/models`` + ``X`` -> ``X/models``."""
    return url.rstrip("/") + "/" + path.rstrip("/").rsplit("/", 1)[-1]


# ----------------------------------------------------------------------------- files
PRIVATE_ROOT = "/tmp"  # the part of a pod's filesystem that the emulating backends make private


@dataclass(frozen=True)
class FileContents:
    """What a ``files:`` entry puts at ``path`` and whether runtime tokens are substituted."""

    path: str
    data: bytes
    substitute_tokens: bool


def file_contents(path: str, *, contents: str | None, is_base64: bool,
                  local_text: bytes | None) -> FileContents:
    """``localpath:`` (the client inlines the local file as ``contents``), base64, or text.

    Text and localpath contents get OSMO's token substitution when the pod is built;
    base64 data is binary and is written as decoded.
    """
    if local_text is not None:
        return FileContents(path, local_text, substitute_tokens=True)
    if is_base64:
        return FileContents(path, base64.b64decode(contents or ""), substitute_tokens=False)
    return FileContents(path, (contents or "").encode("utf-8"), substitute_tokens=True)


def private_relative(path: str) -> str | None:
    """``/tmp/a/b`` -> ``a/b``; None when ``path`` is outside the private ``/tmp``."""
    parts: list[str] = []
    for piece in path.split("/"):
        if piece in ("", "."):
            continue
        if piece == "..":
            if parts:
                parts.pop()
            continue
        parts.append(piece)
    if not parts or parts[0] != PRIVATE_ROOT.strip("/"):
        return None
    return "/".join(parts[1:])


# ---------------------------------------------------------------------------- inputs
class InputKind(str, Enum):
    URL = "url"
    TASK = "task"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class InputRule:
    """One ``inputs:`` entry: downloaded into input/N whenever the task gets a new pod.

    A restarted sibling (in place) does not download again; a rescheduled task does.
    ``task:`` inputs are the upstream task's ``{{output}}`` folder, as uploaded when that
    task completed.
    """

    index: int
    kind: InputKind
    source: str  # the url, or the producing task's name (without a workflow id)
    regex: str | None
    workflow_id: str | None = None  # ``task: "<workflow_id>:<task>"``: another workflow's task

    def keeps(self, relative_path: str) -> bool:
        """Whether a file (path relative to the staged root, ``/``-separated) is staged."""
        return self.regex is None or re.search(self.regex, relative_path) is not None


def input_rules(inputs: Sequence[object]) -> tuple[InputRule, ...]:
    """From a task's ``inputs:`` (objects with ``task``, ``url``, ``regex``)."""
    rules = []
    for index, item in enumerate(inputs):
        task = getattr(item, "task", None)
        if task is not None:
            workflow_id, _, name = str(task).rpartition(":")
            rules.append(InputRule(index, InputKind.TASK, name, getattr(item, "regex", None),
                                   workflow_id or None))
        else:
            url = str(getattr(item, "url", ""))
            rules.append(InputRule(index, InputKind.URL, url, getattr(item, "regex", None)))
    return tuple(rules)


def input_token_key(token: Token, rules: Sequence[InputRule]) -> int | None:
    """Which input ``{{input:N}}`` / ``{{input:<task>}}`` names; None: no such input."""
    index = token.input_index
    if index is not None:
        return index if index < len(rules) else None
    wanted = normalize_name(token.argument)
    named = (r.index for r in rules if r.kind is InputKind.TASK and normalize_name(r.source) == wanted)
    return next(named, None)


# ------------------------------------------------------------------------------- DAG
class DagError(ValueError):
    """A spec the runtime cannot run (a ``task:`` input that cannot be ordered, a ``regex:``
    that does not compile); ``path`` is the YAML path to point at."""

    def __init__(self, message: str, path: str, fix: str) -> None:
        super().__init__(message)
        self.path, self.fix = path, fix


def check_patterns(spec: object) -> None:
    """Every ``regex:`` (inputs, outputs, checkpoint) compiles, before anything runs:
    otherwise the first staging or upload would fail halfway, after work was done."""
    groups = spec.task_groups()  # type: ignore[attr-defined]
    flat = getattr(spec, "groups", None) is None
    for g_index, group in enumerate(groups):
        for t_index, task in enumerate(group.tasks):
            base = f"workflow.tasks[{g_index}]" if flat else f"workflow.groups[{g_index}].tasks[{t_index}]"
            for field in ("inputs", "outputs", "checkpoint"):
                for index, item in enumerate(getattr(task, field, ())):
                    regex = getattr(item, "regex", None)
                    if regex is None:
                        continue
                    try:
                        re.compile(regex)
                    except re.error as error:
                        raise DagError(f"regex {regex!r} does not compile: {error}",
                                       f"{base}.{field}[{index}].regex",
                                       "write a Python regular expression (it is searched in "
                                       "each file's path relative to the folder)") from None


@dataclass(frozen=True)
class TaskInputEdge:
    """Task ``consumer`` (in group ``consumer_group``) takes ``producer``'s outputs."""

    consumer: str
    consumer_group: str
    producer: str
    path: str  # YAML path of the inputs entry, e.g. workflow.groups[1].tasks[0].inputs[0]


@dataclass(frozen=True)
class WorkflowDag:
    """Groups and the groups each one waits for (its upstream), in spec order."""

    groups: tuple[str, ...]
    upstream: Mapping[str, tuple[str, ...]]

    def ready(self, finished: Iterable[str], started: Iterable[str]) -> tuple[str, ...]:
        """Groups not started yet whose upstream groups have all finished, in spec order."""
        done, begun = set(finished), set(started)
        return tuple(g for g in self.groups if g not in begun and set(self.upstream[g]) <= done)

    def downstream_of(self, group: str) -> tuple[str, ...]:
        """Every group that (transitively) waits for ``group``."""
        found: list[str] = []
        frontier = [group]
        while frontier:
            current = frontier.pop()
            for g in self.groups:
                if current in self.upstream[g] and g not in found:
                    found.append(g)
                    frontier.append(g)
        return tuple(g for g in self.groups if g in found)

    def order(self) -> tuple[str, ...]:
        """A topological order (spec order where the DAG allows it)."""
        done: list[str] = []
        while len(done) < len(self.groups):
            done.extend(self.ready(done, done)[:1])
        return tuple(done)


def build_dag(groups: Sequence[tuple[str, Sequence[str]]], edges: Sequence[TaskInputEdge]) -> WorkflowDag:
    """Check every ``task:`` input and order the groups; raise :class:`DagError` on the first problem.

    ``groups`` is (group name, its task names) in spec order. A producer must be a task
    of this workflow in another group (a group's tasks start together, so one cannot
    wait for a sibling's outputs) and the groups must not wait for each other in a cycle.
    """
    owner = {normalize_name(t): (g, t) for g, tasks in groups for t in tasks}
    upstream: dict[str, list[str]] = {g: [] for g, _ in groups}
    first_edge: dict[tuple[str, str], TaskInputEdge] = {}
    for edge in edges:
        found = owner.get(normalize_name(edge.producer))
        if found is None:
            known = ", ".join(t for _, tasks in groups for t in tasks)
            raise DagError(f"task {edge.consumer} takes inputs from task {edge.producer!r}, "
                           "which is not a task of this workflow", edge.path,
                           f"name one of: {known}")
        producer_group, producer = found
        if producer_group == edge.consumer_group:
            raise DagError(f"task {edge.consumer} takes inputs from task {producer} of its own group "
                           f"{producer_group}; a group's tasks start together, so its outputs "
                           "cannot exist yet", edge.path,
                           "put the producing task in a group of its own, or drop the input")
        if producer_group not in upstream[edge.consumer_group]:
            upstream[edge.consumer_group].append(producer_group)
            first_edge[(edge.consumer_group, producer_group)] = edge
    dag = WorkflowDag(tuple(g for g, _ in groups), {g: tuple(u) for g, u in upstream.items()})
    cycle = _find_cycle(dag)
    if cycle:
        edge = first_edge[(cycle[0], cycle[1])]
        raise DagError("task inputs form a cycle: group " + " -> ".join(cycle)
                       + " (each waits for the outputs of the next)", edge.path,
                       "make the data flow between groups one-directional")
    return dag


def _find_cycle(dag: WorkflowDag) -> tuple[str, ...]:
    """A cycle as ``(a, b, ..., a)`` (a waits for b ...), or () when there is none."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(group: str) -> tuple[str, ...]:
        state[group] = 1
        path.append(group)
        for up in dag.upstream[group]:
            if state.get(up) == 1:
                return (*path[path.index(up):], up)
            if up not in state and (found := visit(up)):
                return found
        path.pop()
        state[group] = 2
        return ()

    for group in dag.groups:
        if group not in state and (found := visit(group)):
            return found
    return ()


def workflow_dag(spec: object, *, other_workflows: bool = False) -> WorkflowDag:
    """The DAG of a validated spec (``workflow.groups`` or a flat ``workflow.tasks`` list).

    ``other_workflows``: accept ``task: "<workflow_id>:<task>"`` inputs (OSMO resolves them
    on its server; they add no edge here). The emulating backends cannot reach them.
    """
    groups = spec.task_groups()  # type: ignore[attr-defined]
    flat = getattr(spec, "groups", None) is None
    edges = []
    for g_index, group in enumerate(groups):
        for t_index, task in enumerate(group.tasks):
            base = f"workflow.tasks[{g_index}]" if flat else f"workflow.groups[{g_index}].tasks[{t_index}]"
            for rule in input_rules(task.inputs):
                if rule.kind is InputKind.TASK and rule.workflow_id is not None:
                    if other_workflows:
                        continue
                    raise DagError(f"task {task.name} takes inputs from task {rule.source} of workflow "
                                   f"{rule.workflow_id}; this backend runs one workflow and cannot "
                                   "fetch another one's outputs", f"{base}.inputs[{rule.index}]",
                                   "stage that workflow's output through a url: input instead")
                if rule.kind is InputKind.TASK:
                    edges.append(TaskInputEdge(task.name, group.name, rule.source,
                                               f"{base}.inputs[{rule.index}]"))
    return build_dag([(g.name, [t.name for t in g.tasks]) for g in groups], edges)


def lead_first(tasks: Sequence[object]) -> tuple[object, ...]:
    """The lead first (it starts first and its end decides), then the others in spec order."""
    leads = tuple(t for t in tasks if getattr(t, "lead", False))
    return (*leads, *(t for t in tasks if t not in leads))
