"""The Slurm backend: ``submit(dry_run(job, options))``, one sbatch job per group."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflows import osmo_runtime as rt
from workflows.backends.base import Backend, Request, SubmitResult
from workflows.backends.options import BackendOption, OptionType
from workflows.backends.options import parse_options as _parse
from workflows.backends.slurm.script import (
    DEFAULT_MAX_RETRY_PER_TASK,
    SlurmOptions,
    group_script,
    job_name,
    upstream_job_variable,
)
from workflows.backends.slurm.tasks import file_bundle_path, token_map
from workflows.errors import BackendError
from workflows.spec import Group, Task

if TYPE_CHECKING:
    from workflows.pipeline import LoadedWorkflow

GRACE_SIGNALS = ("USR1", "USR2", "TERM", "INT")


@dataclass(frozen=True)
class SbatchJob:
    """One group: its script, where it is written, and the sbatch argv that submits it.

    ``after`` are the groups whose task outputs this group takes as inputs: it is
    submitted with ``--dependency=afterok:<their job ids>`` and gets those ids exported.
    ``argv`` shows them as ``<job of GROUP>``; :meth:`argv_with` fills them in.
    """

    group: str
    script_name: str
    script: str
    argv: tuple[str, ...]
    after: tuple[str, ...] = ()

    def argv_with(self, job_ids: Mapping[str, str]) -> tuple[str, ...]:
        return tuple(_fill_job_ids(word, job_ids) for word in self.argv)


def _placeholder(group: str) -> str:
    return f"<job of {group}>"


def _fill_job_ids(word: str, job_ids: Mapping[str, str]) -> str:
    for group, job_id in job_ids.items():
        word = word.replace(_placeholder(group), job_id)
    return word


def sbatch_argv(script_path: str, after: tuple[str, ...]) -> tuple[str, ...]:
    if not after:
        return ("sbatch", "--parsable", script_path)
    ids = ":".join(_placeholder(g) for g in after)
    exports = ",".join(f"{upstream_job_variable(g)}={_placeholder(g)}" for g in after)
    # --kill-on-invalid-dep: when an upstream job fails, this one is cancelled instead of
    # pending forever (OSMO does not run a task whose upstream failed either).
    return ("sbatch", "--parsable", f"--dependency=afterok:{ids}", "--kill-on-invalid-dep=yes",
            f"--export=ALL,{exports}", script_path)


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


def _file_bytes(group: Group, task: Task, base_dir: Path, where: str) -> dict[str, bytes]:
    """The task's ``files:`` by bundle path: ``files/`` get tokens substituted in the job,
    ``verbatim/`` (base64 data) are copied as they are, as OSMO writes them."""
    out: dict[str, bytes] = {}
    tokens = token_map(group, task, where)
    for item in task.files:
        relative = file_bundle_path(item.path, where)
        local = None
        if item.localpath is not None:
            source = (base_dir / item.localpath).resolve()
            try:
                local = source.read_bytes()
            except OSError as error:
                raise BackendError(
                    f"cannot read localpath {item.localpath!r} of file {item.path}: {error.strerror}",
                    where=where,
                    fix="localpath is relative to the workflow file's folder",
                ) from None
        contents = rt.file_contents(item.path, contents=item.contents, is_base64=bool(item.base64),
                                    local_text=local)
        if not contents.substitute_tokens:
            out[f"verbatim/{task.name}/{relative}"] = contents.data
            continue
        try:
            text = contents.data.decode("utf-8")
        except UnicodeDecodeError:  # a binary localpath file: nothing to substitute in it
            out[f"verbatim/{task.name}/{relative}"] = contents.data
            continue
        out[f"files/{task.name}/{relative}"] = tokens.canonical(text).encode("utf-8")
    return out


OPTIONS = (
    BackendOption("partition", OptionType.TEXT, "sbatch --partition"),
    BackendOption("time", OptionType.TEXT, "sbatch --time (default: the workflow's timeout.exec_timeout)"),
    BackendOption("account", OptionType.TEXT, "sbatch --account"),
    BackendOption("tasks_per_node", OptionType.INT, "tasks sharing one node", default=1, minimum=1),
    BackendOption("grace", OptionType.INT, "seconds of warning before the time limit "
                  "(--signal=B:SIG@N)", default=60, minimum=1, maximum=65535),  # 16 bits in Slurm
    BackendOption("grace_signal", OptionType.CHOICE, "the signal Slurm sends before the time limit",
                  default="USR1", choices=GRACE_SIGNALS),
    BackendOption("stop_signal", OptionType.TEXT, "what the tasks get on the grace signal: the "
                  "signal the training saves on (default TERM; Lightning: USR1)"),
    BackendOption("max_retry_per_task", OptionType.INT, "RESCHEDULEs after failures per job "
                  "(OSMO's pool setting; OSMO's own default is 0)",
                  default=DEFAULT_MAX_RETRY_PER_TASK, minimum=0),
    BackendOption("workdir", OptionType.PATH, "shared directory for scripts, task dirs and logs "
                  "(default ./resched-slurm)", path_kind="dir"),
)


def parse_options(options: Mapping[str, Any]) -> SlurmOptions:
    opts = _parse(OPTIONS, options, "slurm")
    return SlurmOptions(
        workdir=Path(opts["workdir"] or Path.cwd() / "resched-slurm").absolute(),
        partition=opts["partition"],
        time=opts["time"],
        account=opts["account"],
        tasks_per_node=opts["tasks_per_node"],
        grace_s=opts["grace"],
        grace_signal=opts["grace_signal"],
        stop_signal=_stop_signal(opts),
        max_retry_per_task=opts["max_retry_per_task"],
    )


class SlurmBackend(Backend):
    name = "slurm"
    lint_target = "slurm"
    options = OPTIONS

    def dry_run(self, job: LoadedWorkflow, options: Mapping[str, Any]) -> SlurmRequest:
        opts = parse_options(options)
        spec = job.spec
        where = str(job.source) if job.source else spec.name
        try:
            dag = rt.workflow_dag(spec)
        except rt.DagError as error:
            raise BackendError(str(error), where=f"{where} {error.path}", fix=error.fix) from None
        files: dict[str, bytes] = {}
        for group in spec.task_groups():
            for task in group.tasks:
                files.update(_file_bytes(group, task, job.base_dir, f"{where} task {task.name}"))
        # The submission dir is named by its content: the same spec and files share one.
        digest = hashlib.sha256(job.rendered.text.encode())
        for relative, data in sorted(files.items()):
            digest.update(relative.encode() + b"\0" + hashlib.sha256(data).digest())
        submission = f"submissions/{spec.name}-{digest.hexdigest()[:12]}"
        bundle = str(opts.workdir / submission)
        all_files = {f"{submission}/{k}": v for k, v in files.items()}
        jobs = []
        groups = {g.name: g for g in spec.task_groups()}
        for group_name in dag.order():  # an upstream job is submitted before its dependents
            group = groups[group_name]
            script = group_script(spec, group, opts, bundle, where)
            name = f"{submission}/{job_name(spec, group)}.sbatch"
            all_files[name] = script.encode()
            after = dag.upstream[group_name]
            jobs.append(
                SbatchJob(group.name, name, script, sbatch_argv(str(opts.workdir / name), after), after)
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
        new_paths = _not_yet_there(request)
        request.write(request.workdir)
        ids: dict[str, str] = {}
        try:
            for job in request.jobs:  # in DAG order: the ids a job depends on are known
                ids[job.group] = self._sbatch(job, job.argv_with(ids))
        except BaseException:
            if not ids:  # nothing was submitted: a failed command leaves nothing behind
                _remove_new(new_paths)
            raise
        job_ids = [ids[job.group] for job in request.jobs]
        message = ", ".join(f"group {j.group}: job {i}" for j, i in zip(request.jobs, job_ids))
        return SubmitResult(
            backend=self.name, job_id=",".join(job_ids), message=f"submitted {message}"
        )

    @staticmethod
    def _sbatch(job: SbatchJob, argv: tuple[str, ...]) -> str:
        env = os.environ.copy()
        # sbatch exports the environment: the job's in-job helpers run with the Python
        # that submitted it (the one with resched installed), unless the user chose one.
        env.setdefault("RESCHED_PYTHON", sys.executable)
        done = subprocess.run(list(argv), capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise BackendError(
                f"sbatch refused group {job.group}: {done.stderr.strip() or done.stdout.strip()}",
                fix="check SLURM_CONF, the partition and the account",
            )
        return done.stdout.strip().split(";", 1)[0]


def _not_yet_there(request: SlurmRequest) -> list[Path]:
    """What ``request.write`` is about to create (files, and the folders above them up to
    and including the work dir), deepest first: removed again when no job was submitted."""
    targets = [request.workdir / relative for relative in request.files]
    targets.append(request.workdir / "sbatch-argv.txt")
    new: set[Path] = set()
    for target in targets:
        for path in (target, *target.parents):
            if os.path.lexists(path):
                break
            new.add(path)
    return sorted(new, key=lambda p: len(p.parts), reverse=True)


def _remove_new(paths: list[Path]) -> None:
    """Remove only what this submit created: its files, then its folders if empty."""
    for path in paths:
        try:
            if path.is_dir() and not path.is_symlink():
                path.rmdir()  # never a tree: a folder someone filled meanwhile stays
            else:
                path.unlink()
        except OSError:
            pass


def _stop_signal(options: Mapping[str, Any]) -> str:
    """The signal the tasks get on the grace signal (default TERM; Lightning: USR1)."""
    from wrapper.stop_outcome import parse_stop_signal

    return parse_stop_signal(str(options.get("stop_signal") or "TERM"),
                             where="--option stop_signal").name.removeprefix("SIG")
