"""The local executor's runtime: the workflow DAG, each group with OSMO's group semantics.

Groups run as OSMO runs them: every group whose upstream groups (``inputs: - task:``)
have completed starts at once, in parallel with the others. A group's tasks are staged first and then started together (the barrier). The loop
then watches every run: a run that ends goes through exitActions (first match; then
0 -> COMPLETED, else FAILED; RESCHEDULE while retry_id < --max-retry-per-task) and the
group rules of section 6 (see :mod:`.semantics`). ``timeout.exec_timeout`` bounds each
group. Every process is in its own group and is stopped (TERM, grace, KILL) when the
run ends, fails, or is interrupted.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from workflows.backends import taskfs
from workflows.backends.local.chaos import parse_chaos
from workflows.backends.local.chaos_driver import ChaosDriver
from workflows.backends.local.inject import install_hook
from workflows.backends.local.plan import LocalPlan, PlannedGroup, PlannedTask
from workflows.backends.local.progress import Progress, TaskRow
from workflows.backends.local.staging import stage_input, upload_outputs
from workflows.backends.local.taskrun import RunContext, TaskRun, node_name, start_run
from workflows.backends.local.timeline import Timeline
from workflows.osmo_runtime import exit_decision, group_reaction

POLL_S = 0.05


@dataclass
class TaskState:
    task: PlannedTask
    retry_id: int = -1  # OSMO's retry_id: the pod number, from 0
    attempts: int = 0  # command runs, in place or in a new pod
    run: TaskRun | None = None
    status: str = "WAITING"
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pod_dir(self) -> Path:
        return self.task.task_dir / f"pod-{self.retry_id}"


@dataclass
class GroupRun:
    """A started group: its task states (the lead first) and when its barrier opened."""

    group: PlannedGroup
    states: list[TaskState]
    started: float


@dataclass(frozen=True)
class RunResult:
    status: str  # COMPLETED | FAILED | CANCELED
    reason: str
    started_at: float
    ended_at: float
    group_status: dict[str, str]
    attempts: tuple[dict[str, Any], ...]
    chaos_not_fired: tuple[str, ...]
    chaos_notes: tuple[str, ...] = ()  # chaos that could not fire, said during the run


class Interrupted(Exception):
    """Ctrl-C or SIGTERM to the executor."""


class Executor:
    def __init__(self, plan: LocalPlan, progress: Progress, *, timeline: Timeline | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.plan, self.progress = plan, progress
        self.timeline = timeline or Timeline()
        self.timeline.listen(progress.on_event)
        self.clock, self.sleep = clock, sleep
        self.options = plan.options
        self.states: dict[str, TaskState] = {t.name: TaskState(t) for t in plan.tasks}
        self.chaos_plan = parse_chaos(self.options.chaos, [t.name for t in plan.tasks])
        self.chaos: ChaosDriver | None = None
        self.ctx: RunContext | None = None

    # -- the run -------------------------------------------------------------------
    def run(self) -> RunResult:
        started = self.timeline.clock()
        self._prepare()
        group_status: dict[str, str] = {}
        status, reason = "COMPLETED", ""
        previous = signal.signal(signal.SIGTERM, _raise_interrupted)
        try:
            for name, (group_result, why) in self._run_dag(group_status):
                if group_result != "COMPLETED" and not reason:
                    status, reason = "FAILED", f"group {name}: {why}"
        except (KeyboardInterrupt, Interrupted):
            status, reason = "CANCELED", "interrupted (Ctrl-C or SIGTERM): every task was stopped"
        finally:
            self._stop_all("run ended")
            signal.signal(signal.SIGTERM, previous)
        self.timeline.add("run_ended", status=status, reason=reason)
        records = tuple(r for s in self.states.values() for r in s.records)
        return RunResult(status, reason, started, self.timeline.clock(), group_status,
                         tuple(sorted(records, key=lambda r: r["started_at"])),
                         tuple(self.chaos.not_fired() if self.chaos else ()),
                         tuple(self.chaos.final_notes() if self.chaos else ()))

    def _run_dag(self, group_status: dict[str, str]) -> Iterator[tuple[str, tuple[str, str]]]:
        """OSMO's DAG: every group whose upstream groups completed runs now, in parallel
        with the others; a group starts only after its upstream's outputs were uploaded
        (``_end_group`` uploads them before the group counts as finished). A group whose
        upstream did not complete never starts (FAILED_UPSTREAM)."""
        groups = {g.name: g for g in self.plan.groups}
        active: dict[str, GroupRun] = {}
        while True:
            for group in self.plan.groups:
                if group.name in group_status or group.name in active:
                    continue
                if not all(d in group_status for d in group.depends_on):
                    continue
                failed = [d for d in group.depends_on if group_status[d] != "COMPLETED"]
                if failed:
                    group_status[group.name] = "FAILED_UPSTREAM"
                    why = f"upstream group {', '.join(failed)} did not complete"
                    self.timeline.add("group_skipped", group.name, reason=why)
                    self.progress.line(f"{group.name}  SKIPPED  {why}")
                    continue
                active[group.name] = self._start_group(groups[group.name])
            if not active:
                return
            self._tick()
            for name, group_run in list(active.items()):
                ended = self._step_group(group_run)
                if ended is not None:
                    del active[name]
                    group_status[name] = ended[0]
                    yield name, ended
            self.sleep(POLL_S)

    def _prepare(self) -> None:
        workdir = self.plan.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        mode = taskfs.choose_mode(allow_rewrite=len(self.plan.tasks) == 1)
        for task in self.plan.tasks:
            taskfs.check_file_paths(task.files)
        hook = install_hook(workdir / "chaos-hook") if self.chaos_plan.needs_exit_hook else None
        keep = taskfs.outermost((workdir.resolve(), *taskfs.software_paths()))
        self.ctx = RunContext(self.timeline, mode, keep, hook,
                              on_output=self.progress.task_output)
        self.chaos = ChaosDriver(self.chaos_plan, [t.name for t in self.plan.tasks], self.timeline,
                                 stop_grace_s=self.options.stop_grace_s, clock=self.clock,
                                 checkpointed_tasks={t.name for t in self.plan.tasks if t.checkpoints},
                                 on_warning=lambda line: self.progress.line(f"warning: {line}"))
        self.timeline.add("run_started", run_id=self.plan.run_id, workdir=str(workdir),
                          task_view=mode, chaos=self.options.chaos)
        for note in self.plan.not_emulated:
            self.progress.line(f"note: {note}")
        if mode == "rewrite":
            self.progress.line("note: no mount namespace here; /tmp paths are rewritten "
                               "(single-task fallback, see docs/local-executor.md)")

    def _start_group(self, group: PlannedGroup) -> GroupRun:
        states = [self.states[t.name] for t in group.tasks]
        states.sort(key=lambda s: not s.task.lead)  # the lead's exit is looked at first
        after = f" after {', '.join(group.depends_on)}" if group.depends_on else ""
        self.timeline.add("group_started", group.name, after=list(group.depends_on))
        self.progress.line(f"{group.name}  GROUP    started{after}")
        for state in states:
            self._new_pod(state)
        for state in states:  # barrier: every task is staged before any starts
            self._start(state)
        return GroupRun(group, states, self.clock())

    def _step_group(self, group_run: GroupRun) -> tuple[str, str] | None:
        """One look at a running group: its result once it has ended, else None."""
        group, states = group_run.group, group_run.states
        timeout = self.plan.exec_timeout_s
        if timeout is not None and self.clock() - group_run.started > timeout:
            why = f"exec_timeout {timeout:g}s exceeded"
            self._end_group(states, "FAILED", why)
            return "FAILED", why
        for state in states:
            if state.run is not None and state.run.poll() is not None:
                return self._on_exit(state, group, states)
        return None

    def _tick(self) -> None:
        runs = {name: s.run for name, s in self.states.items() if s.run is not None}
        if self.chaos is not None:
            for fired in self.chaos.tick(runs):
                self.progress.line(f"{fired.task}  CHAOS    {fired.fault.describe()}: {fired.description}")
        now = self.clock()
        for run in runs.values():
            if run.kill_at is not None and now > run.kill_at and run.poll() is None:
                run.kill_at = None
                run.stop(grace_s=0.0)
        self.progress.refresh([self._row(s) for s in self.states.values()])

    # -- starting and ending runs --------------------------------------------------
    def _new_pod(self, state: TaskState) -> None:
        """OSMO's new task attempt: a fresh /tmp, inputs downloaded again."""
        state.retry_id += 1
        state.pod_dir.mkdir(parents=True, exist_ok=True)
        state.task.output_dir.mkdir(parents=True, exist_ok=True)
        dirs = {s.task.name: s.task.task_dir for s in self.states.values()}
        for item in state.task.inputs:
            step = stage_input(item, dirs)
            self.timeline.add("inputs_staged", state.task.name, index=item.index, source=item.source,
                              step=step, retry_id=state.retry_id)

    def _start(self, state: TaskState) -> None:
        assert self.ctx is not None
        state.attempts += 1
        state.run = start_run(state.task, state.retry_id, state.attempts, state.pod_dir, self.ctx)
        state.status = "RUNNING"

    def _finish(self, state: TaskState, status: str, *, action: str, note: str = "",
                stopped: bool = False) -> dict[str, Any]:
        run = state.run
        assert run is not None
        outcome = run.finish()
        code = run.exit_code()
        record = {
            "task": state.task.name, "attempt": run.attempt, "retry_id": run.retry_id,
            "started_at": _wall(run.started_mono, self), "ended_at": self.timeline.clock(),
            "exit_code": code, "action": action, "status": status, "note": note,
            "stopped_by_executor": stopped or run.stopped_by_executor,
            "forced_exit_code": run.forced_exit_code is not None,
            "wrapper": _wrapper_summary(outcome), "log": str(run.log_path),
        }
        state.records.append(record)
        state.run = None
        fields: dict[str, Any] = {k: v for k, v in record.items() if k not in ("task", "log")}
        self.timeline.add("task_ended", state.task.name, **fields)
        return record

    def _on_exit(self, state: TaskState, group: PlannedGroup, states: list[TaskState]) -> tuple[str, str] | None:
        run = state.run
        assert run is not None
        run.finish()  # final checkpoint upload happens here, before anything restarts
        code = run.exit_code()
        decision = exit_decision(state.task.exit_rules, code, retry_id=state.retry_id,
                                 max_retry_per_task=self.options.max_retry_per_task)
        reaction = group_reaction(is_lead=state.task.lead, action=decision.action,
                                  ignore_nonlead_status=group.ignore_nonlead_status)
        if code != 0:
            self.timeline.add("failure_detected", state.task.name, source="executor", exit_code=code)
        record = self._finish(state, reaction.task_status, action=decision.action, note=decision.note)
        self.timeline.add("decision", state.task.name, source="executor", action=decision.action,
                          exit_code=code, reason=reaction.reason, note=decision.note)
        self.progress.task_ended(record, reaction.reason)
        if decision.note:
            self.progress.line(f"{state.task.name}  NOTE     {decision.note}")
        if reaction.group_status is not None:
            self._end_group(states, reaction.group_status, reaction.reason, except_for=state)
            state.status = reaction.task_status
            why = reaction.reason if reaction.group_status == "COMPLETED" else (
                f"task {state.task.name} exit {code} -> {decision.action}: {reaction.reason}"
                + (f"; {decision.note}" if decision.note else ""))
            return reaction.group_status, why
        if not (reaction.new_pod or reaction.restart_others):
            state.status = reaction.task_status
            self._upload_outputs(state)
            return None
        self._restart(state, states, reaction.restart_others, reaction.reason,
                      excluded=_excluded_nodes(record))
        return None

    def _restart(self, state: TaskState, states: list[TaskState], others: bool, why: str,
                 excluded: frozenset[str] = frozenset()) -> None:
        siblings = [s for s in states if s is not state] if others else []
        for sibling in siblings:
            if sibling.run is not None:
                sibling.run.stop(self.options.stop_grace_s)
                record = self._finish(sibling, "RESTARTING", action="", note=why, stopped=True)
                excluded |= _excluded_nodes(record)
        self._new_pod(state)
        # A sibling on a node a wrapper excluded (e.g. NVRx flagged its ranks as stragglers)
        # is not restarted in place: it gets a new pod, i.e. another emulated node, as a
        # scheduler honouring the excluded-node list would place it (Slurm's --exclude).
        moved = [s for s in siblings if node_name(s.task, s.retry_id) in excluded]
        for sibling in moved:
            node = node_name(sibling.task, sibling.retry_id)
            self._new_pod(sibling)
            self.timeline.add("node_excluded", sibling.task.name, node=node,
                              new_node=node_name(sibling.task, sibling.retry_id))
            self.progress.line(f"{sibling.task.name}  EXCLUDE  node {node} (a wrapper excluded "
                               "it): new pod on another node")
        for restarted in [state, *siblings]:
            self._start(restarted)
            mode = "new pod" if restarted is state or restarted in moved else "in place"
            self.timeline.add("attempt_restarted", restarted.task.name, mode=mode,
                              attempt=restarted.attempts, retry_id=restarted.retry_id, reason=why)
            self.progress.line(f"{restarted.task.name}  RESTART  attempt {restarted.attempts} "
                               f"({mode}, retry_id {restarted.retry_id})")

    def _end_group(self, states: list[TaskState], status: str, why: str,
                   except_for: TaskState | None = None) -> None:
        """The lead ended (or the group failed): every other task takes the status."""
        for state in states:
            if state is except_for:
                continue
            if state.run is not None:
                state.run.stop(self.options.stop_grace_s)
                self._finish(state, status, action="", note=why, stopped=True)
            state.status = status
        for state in states:
            self._upload_outputs(state)
        self.timeline.add("group_ended", states[0].task.group, status=status, reason=why)

    def _upload_outputs(self, state: TaskState) -> None:
        if state.task.outputs:
            written = upload_outputs(state.task.output_dir, state.task.outputs)
            self.timeline.add("outputs_uploaded", state.task.name, files=len(written))

    def _stop_all(self, why: str) -> None:
        """Stop every run (a second Ctrl-C skips the grace: SIGKILL at once)."""
        grace = self.options.stop_grace_s
        for state in self.states.values():
            if state.run is None:
                continue
            try:
                state.run.stop(grace)
            except (KeyboardInterrupt, Interrupted):
                grace = 0.0
                state.run.stop(grace)
            self._finish(state, "CANCELED" if state.status == "RUNNING" else state.status,
                         action="", note=why, stopped=True)

    def _row(self, state: TaskState) -> TaskRow:
        return TaskRow(state.task.name, state.status, state.attempts, state.retry_id)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted()


def _wall(mono: float, executor: Executor) -> float:
    return executor.timeline.clock() - (executor.clock() - mono)


def _excluded_nodes(record: dict[str, Any]) -> frozenset[str]:
    """The nodes an attempt's wrapper asked to leave out (``exclude_nodes``, e.g. the
    nodes of NVRx's straggler ranks; its own node when ``exclude_node``)."""
    wrapper = record.get("wrapper") or {}
    nodes = {n for n in wrapper.get("exclude_nodes") or () if isinstance(n, str) and n}
    if wrapper.get("exclude_node") is True and isinstance(wrapper.get("node"), str):
        nodes.add(wrapper["node"])
    return frozenset(nodes)


def _wrapper_summary(outcome: dict[str, Any] | None) -> dict[str, Any] | None:
    if outcome is None:
        return None
    keys = ("decision", "rule", "category", "reason", "wrapper_exit_code", "attempt",
            "checkpoint_step_before", "checkpoint_step_after", "exclude_node", "node",
            "exclude_nodes")  # nvrx: straggler nodes, honoured by _restart
    return {k: outcome[k] for k in keys if k in outcome}
