"""One task of a group as a Slurm job step: its token mapping and its launch script.

OSMO substitutes runtime tokens when it builds a pod. On Slurm they are only known when
the job runs (which node, which job id), so each token becomes a shell variable that the
batch script sets before it starts the step:

    {{host:T}}      -> ${RESCHED_HOST_T}     the address of the node task T runs on
    {{input:N}}     -> ${RESCHED_TASK_DIR}/input/N   staged at job start (shared storage)
    {{output}}      -> ${RESCHED_TASK_DIR}/output
    {{workflow_id}} -> ${SLURM_JOB_ID}
    {{uuid}}        -> ${RESCHED_TASK_UUID}  <job id>-<task>, stable across requeues

The same rules apply to ``files:`` contents (substituted by the in-job helper, see
:mod:`workflows.backends.slurm.jobside`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from workflows import osmo_runtime as rt
from workflows.backends.slurm.tokens import TOKEN, env_suffix
from workflows.errors import BackendError
from workflows.spec import Group, Task

PRIVATE_ROOT = rt.PRIVATE_ROOT  # the part of a task's filesystem that is its own (OSMO: the pod's)


def host_variable(task_name: str) -> str:
    return f"RESCHED_HOST_{env_suffix(task_name)}"


@dataclass(frozen=True)
class TokenMap:
    """Which tokens a task may use: the group's task names and the task's inputs."""

    group_tasks: tuple[str, ...]
    inputs: tuple[rt.InputRule, ...]
    where: str

    def variable_for(self, token: rt.Token) -> str:
        """The shell expression a token stands for (``${...}``)."""
        if token.kind is rt.TokenKind.WORKFLOW_ID:
            return "${SLURM_JOB_ID}"
        if token.kind is rt.TokenKind.UUID:
            return "${RESCHED_TASK_UUID}"
        if token.kind is rt.TokenKind.OUTPUT:
            return "${RESCHED_TASK_DIR}/output"
        if token.kind is rt.TokenKind.INPUT:
            return f"${{RESCHED_TASK_DIR}}/input/{self.input_index(token)}"
        host = rt.host_task(token, self.group_tasks)
        if host is None:
            raise BackendError(
                f"{token.text} names no task of this group",
                where=self.where,
                fix="the Slurm backend runs one job per group; use a task of the same group "
                f"({', '.join(self.group_tasks)})",
            )
        return "${" + host_variable(host) + "}"

    def input_index(self, token: rt.Token) -> int:
        index = rt.input_token_key(token, self.inputs)
        if index is None:
            raise BackendError(
                f"{token.text} but the task has {len(self.inputs)} input(s)"
                + ("" if token.input_index is not None else f" and none from task {token.argument}"),
                where=self.where,
                fix="add the input under inputs: or fix the index / task name",
            )
        return index

    def canonical(self, text: str) -> str:
        """``text`` with ``{{input:<task>}}`` written as ``{{input:N}}`` (checked here, at
        submit time) so that the in-job helper only maps indices and known names."""

        def one(token: rt.Token) -> str:
            if token.kind is rt.TokenKind.INPUT:
                return rt.Token(rt.TokenKind.INPUT, str(self.input_index(token))).text
            if token.kind is rt.TokenKind.HOST:
                self.variable_for(token)  # an unknown host fails now, not in the job
            return token.text

        return rt.substitute(text, one)


def shell_word(text: str, tokens: TokenMap) -> str:
    """``text`` as one double-quoted shell word, each OSMO token replaced by its variable."""
    parts: list[str] = []
    position = 0
    for match in TOKEN.finditer(text):
        parts.append(_escape_double_quoted(text[position : match.start()]))
        parts.append(tokens.variable_for(rt.parse_token(match.group(1))))
        position = match.end()
    parts.append(_escape_double_quoted(text[position:]))
    word = "".join(parts)
    if TOKEN.search(text) is None:
        return shlex.quote(text)  # no token: single quotes, nothing expands
    return f'"{word}"'


def _escape_double_quoted(text: str) -> str:
    return re.sub(r'([\\$"`])', r"\\\1", text)


def token_map(group: Group, task: Task, where: str) -> TokenMap:
    return TokenMap(
        group_tasks=tuple(t.name for t in group.tasks), inputs=rt.input_rules(task.inputs), where=where
    )


def backend_environment(task: Task, where: str) -> dict[str, str]:
    """The ``resched wrap`` env contract the backend sets (shell expressions, pre-quoted)."""
    env = {"RESCHED_OUTCOME_FILE": '"${RESCHED_TASK_DIR}/outcome.json"'}
    if len(task.checkpoint) > 1:
        raise BackendError(
            f"task {task.name!r} has {len(task.checkpoint)} checkpoint entries; the wrapper "
            "syncs one directory",
            where=where,
            fix="keep one checkpoint: entry per task (put the files under one directory)",
        )
    for entry in task.checkpoint:
        # OSMO writes a directory under its base name: path /tmp/models, url X -> X/models,
        # which is what an input of X/models downloads after a requeue.
        env["RESCHED_CHECKPOINT_DIR"] = shlex.quote(entry.path)
        env["RESCHED_CHECKPOINT_URL"] = shlex.quote(rt.checkpoint_upload_url(entry.url, entry.path))
        env["RESCHED_SYNC_EVERY"] = shlex.quote(f"{entry.frequency_s:g}")
    return env


def launch_script(group: Group, task: Task, where: str) -> str:
    """The task's step: its environment and command, tokens turned into variables."""
    tokens = token_map(group, task, where)
    lines = [
        "#!/usr/bin/env bash",
        f"# Task {task.name} of group {group.name}: its environment and command from the spec.",
        "# Runs inside the task's private /tmp; RESCHED_* variables come from the batch script.",
        "set -euo pipefail",
    ]
    spec_env: Mapping[str, str] = task.environment
    for name, value in spec_env.items():
        lines.append(f"export {_env_name(name, where)}={shell_word(value, tokens)}")
    lines.append("# Set by the Slurm backend (resched wrap's env contract):")
    for name, expression in backend_environment(task, where).items():
        if name not in spec_env:
            lines.append(f"export {name}={expression}")
    argv: Sequence[str] = (*task.command, *task.args)
    lines.append("exec " + " ".join(shell_word(word, tokens) for word in argv))
    return "\n".join(lines) + "\n"


def _env_name(name: str, where: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise BackendError(
            f"environment name {name!r} is not a valid shell variable name",
            where=where,
            fix="use letters, digits and '_' (not starting with a digit)",
        )
    return name


def file_bundle_path(path: str, where: str) -> str:
    """Where a ``files:`` entry lives inside the task directory (its private /tmp)."""
    relative = rt.private_relative(path)
    if not relative:
        raise BackendError(
            f"file {path!r} is outside /tmp; the Slurm backend gives each task a private /tmp "
            "only (the rest of the node's filesystem is shared)",
            where=where,
            fix="put task files under /tmp/, e.g. /tmp/job/" + path.rsplit("/", 1)[-1],
        )
    return "tmp/" + relative
