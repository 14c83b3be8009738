"""Find `resched wrap` invocations in a task (command, args, files) and their exit codes.

Flags win over environment variables (RESCHED_RESCHEDULE_CODE / RESCHED_ABORT_CODE, set in
the task's environment or assigned in the same script), which win over the defaults.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from workflows.lint.core import LintContext, TaskSite
from wrapper.config import (
    ABORT_CODE_ENV,
    CHECKPOINT_DIR_ENV,
    CHECKPOINT_URL_ENV,
    DEFAULT_ABORT_CODE,
    DEFAULT_RESCHEDULE_CODE,
    RESCHEDULE_CODE_ENV,
)

_MAX_LOCAL_FILE = 1 << 20
_SHELL_SUFFIXES = ("", ".sh", ".bash")
_SHELL_SHEBANG = re.compile(r"^#!\S*/(?:env\s+)?(?:ba|z|da)?sh\b")

_WRAP = re.compile(r"\bresched(?:\s+--debug)?\s+wrap\b")
_END_OF_OPTIONS = re.compile(r"\s--(?:\s|$)|\n")
_ENV_ASSIGN = r"\b{name}=['\"]?(\S+?)['\"]?(?:\s|;|$)"


@dataclass(frozen=True)
class WrapCall:
    where: str  # YAML path of the text that holds the call
    reschedule_code: int | None  # None: not a literal number (e.g. "$CODE")
    reschedule_from: str  # "flag" | "env" | "default"
    abort_code: int | None
    abort_from: str
    checkpoint_url: bool  # the wrapper owns the checkpoint store
    checkpoint_dir: str | None = None  # where the training writes checkpoints (literal paths only)


def task_texts(site: TaskSite, base_dir: Path, *, max_bytes: int,
               keep: Callable[[Path, str], bool] = lambda _path, _text: True,
               ) -> list[tuple[str, str]]:
    """(YAML path, text) of a task's command and of its readable files: inline
    ``contents`` and the ``localpath`` files (regular, at most ``max_bytes``) that
    ``keep(path, text)`` accepts. Shared by the wrap and in-process lint rules."""
    task = site.task
    texts = [(f"{site.path}.command", " ".join((*task.command, *task.args)))]
    for index, file in enumerate(task.files):
        if file.contents is not None and not file.base64:
            texts.append((f"{site.path}.files[{index}].contents", file.contents))
        elif file.localpath is not None:
            path = (base_dir / Path(file.localpath).expanduser()).resolve()
            try:
                if not path.is_file() or path.stat().st_size > max_bytes:
                    continue
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if keep(path, text):
                texts.append((f"{site.path}.files[{index}].localpath", text))
    return texts


def _is_shell_script(path: Path, text: str) -> bool:
    """A shell script uploaded with localpath (a Python file that mentions wrap is not one)."""
    return path.suffix in _SHELL_SUFFIXES or bool(_SHELL_SHEBANG.match(text))


def _strip_comments(text: str) -> str:
    joined = text.replace("\\\n", " ")
    return "\n".join(line for line in joined.splitlines() if not line.lstrip().startswith("#"))


def _as_code(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _option(options: str, name: str) -> str | None:
    match = re.search(rf"--{name}(?:=|\s+)['\"]?([^\s'\"]+)", options)
    return match.group(1) if match else None


def _env(text: str, environment: dict[str, str], name: str) -> str | None:
    assigned = re.findall(_ENV_ASSIGN.format(name=name), text, re.MULTILINE)
    if assigned:
        return str(assigned[-1])
    return environment.get(name)


def _code(
    options: str, text: str, environment: dict[str, str], flag: str, env: str, default: int
) -> tuple[int | None, str]:
    value = _option(options, flag)
    if value is not None:
        return _as_code(value), "flag"
    value = _env(text, environment, env)
    if value is not None:
        return _as_code(value.strip()), "env"
    return default, "default"


def task_wrap_calls(ctx: LintContext, site: TaskSite) -> tuple[WrapCall, ...]:
    """:func:`wrap_calls`, computed once per task and lint run."""
    key = ("wrap_calls", site.path)
    if key not in ctx.memo:
        ctx.memo[key] = wrap_calls(site, ctx.base_dir)
    return ctx.memo[key]  # type: ignore[no-any-return]


def wrap_calls(site: TaskSite, base_dir: Path) -> tuple[WrapCall, ...]:
    calls: list[WrapCall] = []
    env = site.task.environment
    for where, raw in task_texts(site, base_dir, max_bytes=_MAX_LOCAL_FILE, keep=_is_shell_script):
        text = _strip_comments(raw)
        for match in _WRAP.finditer(text):
            end = _END_OF_OPTIONS.search(text, match.end())
            options = text[match.end() : end.start() if end else len(text)]
            resched, resched_from = _code(
                options, text, env, "reschedule-code", RESCHEDULE_CODE_ENV,
                DEFAULT_RESCHEDULE_CODE,
            )
            abort, abort_from = _code(
                options, text, env, "abort-code", ABORT_CODE_ENV, DEFAULT_ABORT_CODE
            )
            owns = _option(options, "checkpoint-url") is not None or bool(
                _env(text, env, CHECKPOINT_URL_ENV)
            )
            directory = _option(options, "checkpoint-dir") or _env(text, env, CHECKPOINT_DIR_ENV)
            literal_dir = directory if directory and directory.startswith("/") else None
            call = WrapCall(where, resched, resched_from, abort, abort_from, owns, literal_dir)
            if call not in calls:
                calls.append(call)
    return tuple(calls)
