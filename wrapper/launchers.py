"""Recognise torchrun / ft_launcher in the command and prepare what they need.

Both launchers collapse a worker's exit code (16, 17, ...) into their own exit 1. To
get the per-rank codes back the wrapper makes the per-rank torchelastic error files
exist where it can find them: it points the launcher's ``--log-dir`` at the attempt
directory through ``PET_LOG_DIR`` (torchrun and ft_launcher read every option from a
``PET_<NAME>`` variable, and an explicit ``--log-dir`` on the command line still wins),
and sets ``TORCHELASTIC_ERROR_FILE`` for the top process (a launcher copies the root
cause's error file there; a plain ``@record`` script writes its own).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

TORCHRUN = "torchrun"
FT_LAUNCHER = "ft_launcher"

_TORCHRUN_MODULES = {"torch.distributed.run", "torch.distributed.launch"}
_FT_MODULES = {"nvidia_resiliency_ext.fault_tolerance.launcher"}
_WRAPPER_PROGRAMS = {"env", "nice", "ionice", "numactl", "taskset", "stdbuf", "time", "exec"}
_TRACKER_FLAG = "--result-rejected-tracker-filename"
_INNER_ATTEMPT = re.compile(r"attempt_(\d+)")

# The elastic agent's "restarting the worker group" lines (torchrun and ft_launcher).
IN_JOB_RESTART = re.compile(
    r"attempts left; will restart worker group|restart attempts left; restarting worker group"
)


def detect_launcher(argv: Sequence[str]) -> str | None:
    """``"torchrun"``, ``"ft_launcher"`` or None, looking through env/nice/python -m."""
    index = 0
    while index < len(argv):
        name = os.path.basename(argv[index])
        if name == TORCHRUN:
            return TORCHRUN
        if name == FT_LAUNCHER:
            return FT_LAUNCHER
        if name.startswith("python"):
            module = _python_module(argv[index + 1:])
            if module in _TORCHRUN_MODULES:
                return TORCHRUN
            if module in _FT_MODULES:
                return FT_LAUNCHER
            return None
        arg = argv[index]
        if name in _WRAPPER_PROGRAMS or "=" in arg or arg.startswith("-") or arg.isdigit():
            index += 1  # `env A=B torchrun ...`, `nice -n 5 torchrun ...`
            continue
        return None
    return None


def _python_module(args: Sequence[str]) -> str | None:
    for position, arg in enumerate(args):
        if arg == "-m" and position + 1 < len(args):
            return args[position + 1]
        if arg.startswith("-m") and len(arg) > 2:
            return arg[2:]
        if not arg.startswith("-"):
            return None
    return None


def tracker_file(argv: Sequence[str], cwd: Path | None = None) -> Path | None:
    """Megatron's ``--result-rejected-tracker-filename`` from the training arguments."""
    value = _flag_value(argv, _TRACKER_FLAG)
    if not value:
        return None
    path = Path(value)
    return path if path.is_absolute() or cwd is None else cwd / path


def launcher_env(
    base: Mapping[str, str], launcher: str | None, attempt_dir: Path
) -> dict[str, str]:
    """The environment for one attempt: error file and (for a launcher) its log dir."""
    env = dict(base)
    env["TORCHELASTIC_ERROR_FILE"] = str(attempt_dir / "error.json")
    if launcher is not None and "PET_LOG_DIR" not in base:
        env["PET_LOG_DIR"] = str(launcher_log_dir(attempt_dir))
    return env


def launcher_log_dir(attempt_dir: Path) -> Path:
    return attempt_dir / "launcher-logs"


def find_error_files(
    attempt_dir: Path, argv: Sequence[str], env: Mapping[str, str], *, since: float
) -> tuple[Path, ...]:
    """The torchelastic error files this attempt produced (written at or after ``since``).

    Per-rank files come first; the top process's own file is listed only when there is
    no per-rank file, because a launcher's copy only repeats its root cause's file.
    """
    roots = {launcher_log_dir(attempt_dir)}
    for user_dir in (env.get("PET_LOG_DIR"), _flag_value(argv, "--log-dir", "--log_dir")):
        if user_dir:
            roots.add(Path(user_dir))  # reused across runs: the mtime filter drops old files
    per_rank = sorted(
        path
        for root in roots
        if root.is_dir()
        for path in root.rglob("error.json")
        if _written_since(path, since)
    )
    per_rank = _last_inner_attempt(per_rank)
    top = attempt_dir / "error.json"
    if per_rank or not _written_since(top, since):
        return tuple(per_rank)
    return (top,)


def _last_inner_attempt(paths: list[Path]) -> list[Path]:
    """Keep the files of the launcher's last in-job restart (``<run>/attempt_<n>/<rank>/``).

    Earlier restarts failed too, but what ended this wrapper attempt is the last one;
    an older, earlier-stamped file would otherwise pass for the root cause.
    """
    latest: dict[Path, int] = {}
    for path in paths:
        found = _INNER_ATTEMPT.fullmatch(path.parent.parent.name)
        if found:
            run_dir = path.parent.parent.parent
            latest[run_dir] = max(latest.get(run_dir, -1), int(found.group(1)))
    kept = []
    for path in paths:
        found = _INNER_ATTEMPT.fullmatch(path.parent.parent.name)
        if not found or int(found.group(1)) == latest[path.parent.parent.parent]:
            kept.append(path)
    return kept


def _written_since(path: Path, since: float) -> bool:
    try:
        return path.is_file() and path.stat().st_mtime >= since - 1.0
    except OSError:
        return False


def _flag_value(argv: Sequence[str], *flags: str) -> str | None:
    for position, arg in enumerate(argv):
        for flag in flags:
            if arg == flag and position + 1 < len(argv):
                return argv[position + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def count_in_job_restarts(lines: Iterable[str]) -> int:
    """How many times the launcher restarted its workers in place during one attempt."""
    return sum(1 for line in lines if IN_JOB_RESTART.search(line))
