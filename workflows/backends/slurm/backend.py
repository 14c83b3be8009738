"""The Slurm backend: ``submit(dry_run(job, options))``, one sbatch job per group."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from workflows.backends.base import Backend, Request, SubmitResult
from workflows.backends.slurm.script import (
    DEFAULT_MAX_RETRY_PER_TASK,
    SlurmOptions,
    group_script,
    job_name,
)
from workflows.backends.slurm.tasks import file_bundle_path
from workflows.errors import BackendError, UsageError
from workflows.spec import Task

if TYPE_CHECKING:
    from workflows.pipeline import LoadedWorkflow

GRACE_SIGNALS = ("USR1", "USR2", "TERM", "INT")


@dataclass(frozen=True)
class SbatchJob:
    """One group: its script, where it is written, and the sbatch argv that submits it."""

    group: str
    script_name: str
    script: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class SlurmRequest(Request):
    """Everything ``submit`` hands to Slurm; ``materialize()`` is exactly that text.

    ``files`` maps a path relative to the work dir to its bytes (the tasks' ``files:``
    and the scripts); ``argv`` run from the work dir submit the jobs.
    """

    workdir: Path
    jobs: tuple[SbatchJob, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def script(self) -> str:
        """The first (for one-group workflows: the only) sbatch script."""
        return self.jobs[0].script

    @property
    def argv(self) -> tuple[str, ...]:
        return self.jobs[0].argv

    def materialize(self) -> str:
        blocks = []
        for job in self.jobs:
            blocks.append(
                f"# sbatch argv: {' '.join(job.argv)}\n# {job.script_name}:\n{job.script}"
            )
        return "\n".join(blocks)

    def write(self, directory: Path) -> list[Path]:
        """Write the scripts, argv and bundled files under ``directory`` (same layout)."""
        written = []
        for relative, data in sorted(self.files.items()):
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            if relative.endswith((".sbatch", ".sh")):
                path.chmod(0o755)
            written.append(path)
        argv_file = directory / "sbatch-argv.txt"
        argv_file.parent.mkdir(parents=True, exist_ok=True)
        argv_file.write_text("".join(" ".join(job.argv) + "\n" for job in self.jobs))
        return [*written, argv_file]


def _file_bytes(task: Task, base_dir: Path, where: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for item in task.files:
        relative = file_bundle_path(item.path, where)
        if item.localpath is not None:
            source = (base_dir / item.localpath).resolve()
            try:
                out[relative] = source.read_bytes()
            except OSError as error:
                raise BackendError(
                    f"cannot read localpath {item.localpath!r} of file {item.path}: {error.strerror}",
                    where=where,
                    fix="localpath is relative to the workflow file's folder",
                ) from None
        elif item.base64:
            out[relative] = base64.b64decode(item.contents or "")
        else:
            out[relative] = (item.contents or "").encode("utf-8")
    return out


def parse_options(options: Mapping[str, Any]) -> SlurmOptions:
    signal = str(options.get("grace_signal") or "USR1").upper().removeprefix("SIG")
    if signal not in GRACE_SIGNALS:
        raise UsageError(
            f"grace signal {signal!r} is not supported", fix=f"use one of {GRACE_SIGNALS}"
        )
    workdir = Path(options.get("workdir") or Path.cwd() / "resched-slurm")
    max_retry = options.get("max_retry_per_task")
    return SlurmOptions(
        workdir=workdir.absolute(),
        partition=options.get("partition"),
        time=options.get("time"),
        account=options.get("account"),
        tasks_per_node=int(options.get("tasks_per_node") or 1),
        grace_s=int(options.get("grace") or 60),
        grace_signal=signal,
        stop_signal=_stop_signal(options),
        max_retry_per_task=DEFAULT_MAX_RETRY_PER_TASK if max_retry is None else int(max_retry),
    )


class SlurmBackend(Backend):
    name = "slurm"
    lint_target = "slurm"
    option_help = MappingProxyType(
        {
            "partition": "sbatch --partition",
            "time": "sbatch --time (default: the workflow's timeout.exec_timeout)",
            "account": "sbatch --account",
            "tasks_per_node": "tasks sharing one node (default 1: one node per task)",
            "grace": "seconds of warning before the time limit (--signal=B:USR1@N, default 60)",
            "stop_signal": "what the tasks get on the grace signal: the signal the training "
                           "saves on (default TERM; Lightning: USR1)",
            "max_retry_per_task": f"RESCHEDULEs after failures per job (default {DEFAULT_MAX_RETRY_PER_TASK})",
            "workdir": "shared directory for scripts, task dirs and logs (default ./resched-slurm)",
        }
    )

    def dry_run(self, job: LoadedWorkflow, options: Mapping[str, Any]) -> SlurmRequest:
        opts = parse_options(options)
        spec = job.spec
        where = str(job.source) if job.source else spec.name
        files: dict[str, bytes] = {}
        for task in spec.all_tasks():
            for relative, data in _file_bytes(
                task, job.base_dir, f"{where} task {task.name}"
            ).items():
                files[f"files/{task.name}/{relative}"] = data
        # The submission dir is named by its content: the same spec and files share one.
        digest = hashlib.sha256(job.rendered.text.encode())
        for relative, data in sorted(files.items()):
            digest.update(relative.encode() + b"\0" + hashlib.sha256(data).digest())
        submission = f"submissions/{spec.name}-{digest.hexdigest()[:12]}"
        bundle = str(opts.workdir / submission)
        all_files = {f"{submission}/{k}": v for k, v in files.items()}
        jobs = []
        for group in spec.task_groups():
            script = group_script(spec, group, opts, bundle, where)
            name = f"{submission}/{job_name(spec, group)}.sbatch"
            all_files[name] = script.encode()
            jobs.append(
                SbatchJob(
                    group.name, name, script, ("sbatch", "--parsable", str(opts.workdir / name))
                )
            )
        return SlurmRequest(workdir=opts.workdir, jobs=tuple(jobs), files=all_files)

    def submit(self, request: Request) -> SubmitResult:
        if not isinstance(request, SlurmRequest):
            raise BackendError("the slurm backend got a request of another backend")
        if shutil.which("sbatch") is None:
            raise BackendError(
                "sbatch is not on PATH",
                fix="run on a Slurm login node (scripts/slurm-cluster up for a local one)",
            )
        request.write(request.workdir)
        job_ids = [self._sbatch(job) for job in request.jobs]
        message = ", ".join(f"group {j.group}: job {i}" for j, i in zip(request.jobs, job_ids))
        return SubmitResult(
            backend=self.name, job_id=",".join(job_ids), message=f"submitted {message}"
        )

    @staticmethod
    def _sbatch(job: SbatchJob) -> str:
        env = os.environ.copy()
        # sbatch exports the environment: the job's in-job helpers run with the Python
        # that submitted it (the one with resched installed), unless the user chose one.
        env.setdefault("RESCHED_PYTHON", sys.executable)
        done = subprocess.run(list(job.argv), capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise BackendError(
                f"sbatch refused group {job.group}: {done.stderr.strip() or done.stdout.strip()}",
                fix="check SLURM_CONF, the partition and the account",
            )
        return done.stdout.strip().split(";", 1)[0]


def _stop_signal(options: Mapping[str, Any]) -> str:
    """The signal the tasks get on the grace signal (default TERM; Lightning: USR1)."""
    from wrapper.stop_outcome import parse_stop_signal

    return parse_stop_signal(str(options.get("stop_signal") or "TERM"),
                             where="--option stop_signal").name.removeprefix("SIG")
