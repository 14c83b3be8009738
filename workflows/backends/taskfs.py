"""A private filesystem view per task: its own ``/tmp`` and its ``files:`` at their paths.

On OSMO every task runs in its own pod, so two tasks that both write ``/tmp/run.sh``
never see each other's file. Locally a task gets the same isolation from a Linux mount
namespace: ``<task_dir>/tmp`` is bind-mounted over ``/tmp`` for that task's processes
only. Ways to get a mount namespace, tried in this order:

``unshare``       ``unshare -m --propagation private`` (root)
``unshare-user``  ``unshare -Urm`` (unprivileged user + mount namespace)
``bwrap``         bubblewrap: ``bwrap --dev-bind / / --bind <task_dir>/tmp /tmp``
``rewrite``       no namespace: ``/tmp`` in the command, arguments, environment and file
                  contents is rewritten to ``<task_dir>/tmp`` (only safe for one task:
                  a program that opens ``/tmp`` on its own still sees the host's)

``RESCHED_TASKFS=<mode>`` forces one. Host paths under ``/tmp`` that the task must keep
seeing (the run's work directory, for staged inputs) are passed as ``keep`` and bound
back at their own paths inside the private ``/tmp``. Only ``files:`` under ``/tmp``, or
over an existing host file, can be materialized (a namespace can mount over a file, but
not create directories on the host's root filesystem).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import wrapper
from workflows.errors import BackendError

MODES = ("unshare", "unshare-user", "bwrap", "rewrite")
MODE_ENV = "RESCHED_TASKFS"
_TMP = Path("/tmp")

# Runs inside the new mount namespace: bind the kept host paths into the private tmp,
# put the private tmp over /tmp, bind files outside /tmp over their host files, exec.
_MOUNT_SCRIPT = r"""
set -e
task_tmp="$1"; shift
while [ "$1" != "--files" ]; do
  mkdir -p "$task_tmp${1#/tmp}"; mount --bind "$1" "$task_tmp${1#/tmp}"; shift
done
shift
while [ "$1" != "--" ]; do mount --bind "$1" "$2"; shift 2; done
shift
mount --rbind "$task_tmp" /tmp
cd "$TASKFS_CWD"
exec "$@"
"""


class TaskViewError(BackendError):
    """No private filesystem view can be made for a task (and why)."""


@dataclass(frozen=True)
class TaskFile:
    """One ``files:`` entry, contents already decoded and tokens substituted."""

    path: str
    data: bytes
    mode: int = 0o755


def is_under_tmp(path: str | Path) -> bool:
    path = Path(os.path.normpath(str(path)))
    return path == _TMP or _TMP in path.parents


def software_paths(env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """Host paths under ``/tmp`` that a task needs to run this machine's software: the
    Python environment resched runs from, resched's own source (an editable install),
    ``PATH`` / ``PYTHONPATH`` entries and the current directory. A checkout (and its virtualenv) under ``/tmp`` would otherwise
    vanish behind the task's private ``/tmp`` and `resched` would not be found."""
    environ = os.environ if env is None else env
    candidates = [Path(sys.prefix), Path(sys.executable).parent, Path.cwd(),
                  # resched's own packages (with an editable install: the checkout)
                  Path(wrapper.__file__).resolve().parent.parent]
    for variable in ("PATH", "PYTHONPATH"):
        candidates += [Path(p) for p in environ.get(variable, "").split(os.pathsep) if p]
    return outermost(p for p in candidates if p.is_absolute() and is_under_tmp(p) and p != _TMP)


def outermost(paths: Iterable[Path]) -> tuple[Path, ...]:
    """Distinct paths with the ones inside another listed path dropped (one bind covers them)."""
    unique = sorted({Path(os.path.normpath(str(p))) for p in paths}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in unique:
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return tuple(kept)


def host_path(view_path: str | Path, task_dir: Path) -> Path:
    """Where a path the task sees under ``/tmp`` lives on the host."""
    relative = Path(os.path.normpath(str(view_path))).relative_to(_TMP)
    return task_dir / "tmp" / relative


def check_file_paths(files: Sequence[TaskFile]) -> None:
    """Refuse ``files:`` that cannot be materialized, naming the path and the fix."""
    for item in files:
        if not is_under_tmp(item.path) and not Path(item.path).is_file():
            raise TaskViewError(
                f"files: path {item.path} is outside /tmp and no such file exists on this "
                "machine, so the local executor cannot mount a private copy there",
                fix="put the file under /tmp (e.g. /tmp/job/...) or run on a cluster backend",
            )


def materialize(task_dir: Path, files: Sequence[TaskFile]) -> None:
    """Create ``<task_dir>/tmp`` and write every file where the task will see it."""
    (task_dir / "tmp").mkdir(parents=True, exist_ok=True)
    os.chmod(task_dir / "tmp", 0o1777)
    for item in files:
        target = host_path(item.path, task_dir) if is_under_tmp(item.path) else _outside_copy(
            task_dir, item.path
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.data)
        os.chmod(target, item.mode)


def _outside_copy(task_dir: Path, path: str) -> Path:
    return task_dir / "files" / path.lstrip("/")


@functools.cache
def _probe(mode: str) -> str | None:
    """None when ``mode`` works here, else why not (one short reason)."""
    if mode == "rewrite":
        return None
    argv = {
        "unshare": ["unshare", "-m", "--propagation", "private", "mount", "--bind", "/tmp", "/tmp"],
        "unshare-user": ["unshare", "-Urm", "mount", "--bind", "/tmp", "/tmp"],
        "bwrap": ["bwrap", "--dev-bind", "/", "/", "--bind", "/tmp", "/tmp", "true"],
    }[mode]
    if shutil.which(argv[0]) is None:
        return f"{argv[0]} is not installed"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return str(error)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return None


def choose_mode(*, allow_rewrite: bool) -> str:
    """The first working mode (or the one ``RESCHED_TASKFS`` names); explain failures."""
    forced = os.environ.get(MODE_ENV, "").strip()
    if forced:
        if forced not in MODES:
            raise TaskViewError(
                f"{MODE_ENV}={forced!r} is not a task view mode", fix=f"use one of {', '.join(MODES)}"
            )
        candidates = [forced]
    else:
        candidates = ["unshare" if os.geteuid() == 0 else "unshare-user", "bwrap"]
    reasons = []
    for mode in candidates:
        if mode == "rewrite" and not allow_rewrite:
            reasons.append("rewrite: only for single-task workflows")
            continue
        why = _probe(mode)
        if why is None:
            return mode
        reasons.append(f"{mode}: {why}")
    if allow_rewrite and not forced:
        return "rewrite"
    raise TaskViewError(
        "cannot give each task a private /tmp (" + "; ".join(reasons) + ")",
        fix="run as root, allow unprivileged user namespaces "
        "(sysctl kernel.unprivileged_userns_clone=1) or install bubblewrap",
    )


def rewrite_tmp(text: str, task_dir: Path, keep: Sequence[Path] = ()) -> str:
    """The ``rewrite`` fallback: point ``/tmp`` references at the task's private tmp.

    Occurrences of ``keep`` paths (host paths the task must still see) are left alone.
    """
    private = str(task_dir / "tmp")
    kept = sorted((str(p) for p in keep), key=len, reverse=True)
    for index, path in enumerate(kept):
        text = text.replace(path, f"\0keep{index}\0")
    text = text.replace("/tmp/", private + "/").replace('"/tmp"', f'"{private}"')
    if text == "/tmp":
        text = private
    for index, path in enumerate(kept):
        text = text.replace(f"\0keep{index}\0", path)
    return text


def run_in_task_view(
    argv: Sequence[str],
    task_dir: Path,
    files: Sequence[TaskFile],
    env: Mapping[str, str],
    *,
    mode: str,
    keep: Sequence[Path] = (),
    cwd: str = "/tmp",
    stdout: int | IO[Any] | None = subprocess.PIPE,
    stderr: int | IO[Any] | None = subprocess.PIPE,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own process group, seeing ``<task_dir>/tmp`` as ``/tmp``.

    ``files`` must already be written by :func:`materialize`. In ``rewrite`` mode the
    caller has rewritten ``argv`` / ``env`` / file contents with :func:`rewrite_tmp`.
    """
    task_tmp = task_dir / "tmp"
    kept = [str(p) for p in keep if is_under_tmp(p) and Path(p) != _TMP]
    outside = [
        arg
        for item in files
        if not is_under_tmp(item.path)
        for arg in (str(_outside_copy(task_dir, item.path)), item.path)
    ]
    full_env = dict(env)
    if mode in ("unshare", "unshare-user"):
        flags = ["-m", "--propagation", "private"] if mode == "unshare" else ["-Urm"]
        full_env["TASKFS_CWD"] = cwd
        command = ["unshare", *flags, "sh", "-c", _MOUNT_SCRIPT, "taskfs", str(task_tmp), *kept]
        command += ["--files", *outside, "--", *argv]
        workdir: str | None = None
    elif mode == "bwrap":
        command = ["bwrap", "--dev-bind", "/", "/", "--bind", str(task_tmp), "/tmp"]
        for path in kept:
            command += ["--bind", path, path]
        for source, target in zip(outside[::2], outside[1::2]):
            command += ["--bind", source, target]
        command += ["--chdir", cwd, "--", *argv]
        workdir = None
    elif mode == "rewrite":
        command, workdir = list(argv), rewrite_tmp(cwd.rstrip("/") + "/", task_dir)
    else:
        raise TaskViewError(f"unknown task view mode {mode!r}", fix=f"use one of {', '.join(MODES)}")
    return subprocess.Popen(
        command,
        env=full_env,
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,  # own process group: stopped as a whole, never orphaned
    )
