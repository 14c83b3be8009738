"""What ``resched status JOB`` / ``resched logs JOB`` show for a Slurm job, without sacct.

Two sources: ``scontrol show job -o`` (state, restarts, exit code, excluded nodes; Slurm
forgets a job MinJobAge seconds after it ends) and the job's files under the work dir
that the generated script writes (``<workdir>/<job id>/allocations.log``, one line per
run; the wrapper's outcome record per task and run; the logs).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflows.errors import BackendError

_FIELD = re.compile(r"(\w+)=(\S*)")


@dataclass(frozen=True)
class AllocationRecord:
    """One run of the job: a line of allocations.log."""

    allocation: int
    nodes: str
    result: str  # COMPLETE | RESCHEDULE | PREEMPT | FAIL
    task: str
    exit_code: str
    reason: str


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    scheduler: dict[str, str]  # scontrol's fields ({} once Slurm has forgotten the job)
    job_root: Path | None
    allocations: tuple[AllocationRecord, ...]
    last_outcome: dict[str, Any] | None
    last_outcome_path: Path | None

    @property
    def state(self) -> str:
        if self.scheduler:
            return self.scheduler.get("JobState", "UNKNOWN")
        last = self.allocations[-1].result if self.allocations else None
        return {"COMPLETE": "COMPLETED", "FAIL": "FAILED"}.get(last or "", "UNKNOWN")

    @property
    def restarts(self) -> int:
        if "Restarts" in self.scheduler:
            return int(self.scheduler["Restarts"])
        return max((a.allocation for a in self.allocations), default=0)

    def lines(self) -> list[str]:
        """The human report."""
        s = self.scheduler
        out = [f"job {self.job_id}: {self.state}, restarts {self.restarts}"]
        if s:
            out.append(
                f"  nodes {s.get('NodeList') or '-'}  excluded {s.get('ExcNodeList', '(null)')}  "
                f"exit {s.get('ExitCode', '-')}  reason {s.get('Reason', '-')}"
            )
        for a in self.allocations:
            out.append(
                f"  run {a.allocation} on {a.nodes}: {a.result} ({a.task} exit {a.exit_code}) {a.reason}"
            )
        if self.last_outcome is not None:
            o = self.last_outcome
            out.append(
                f"  last outcome ({self.last_outcome_path}): decision {o.get('decision')}, "
                f"rule {o.get('rule')}, exit {o.get('exit_code')}, node {o.get('node')}"
                + (", node marked for exclusion" if o.get("exclude_node") else "")
            )
            if o.get("reason"):
                out.append(f"    {o['reason']}")
        if self.job_root is None:
            out.append("  (no job files found: pass --workdir DIR)")
        return out


def scontrol_job(job_id: str) -> dict[str, str]:
    """``scontrol show job -o`` as a dict; {} when Slurm does not know the job (any more)."""
    if shutil.which("scontrol") is None:
        return {}
    done = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return {}
    return dict(_FIELD.findall(done.stdout))


def read_allocations(job_root: Path) -> tuple[AllocationRecord, ...]:
    path = job_root / "allocations.log"
    if not path.exists():
        return ()
    records = []
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        if len(fields) == 6 and fields[0].isdigit():
            records.append(AllocationRecord(int(fields[0]), *fields[1:]))
    return tuple(records)


def allocation_dirs(job_root: Path) -> list[Path]:
    dirs = [p for p in job_root.glob("allocation-*") if p.name.split("-", 1)[1].isdigit()]
    return sorted(dirs, key=lambda p: int(p.name.split("-", 1)[1]))


def last_outcome(job_root: Path, task: str | None) -> tuple[dict[str, Any] | None, Path | None]:
    """The newest run's outcome record: of the task that decided, else any task's."""
    for run in reversed(allocation_dirs(job_root)):
        candidates = ([run / "tasks" / task / "outcome.json"] if task else []) + sorted(
            run.glob("tasks/*/outcome.json")
        )
        for path in candidates:
            if path.exists():
                try:
                    return json.loads(path.read_text()), path
                except (OSError, ValueError):
                    continue
    return None, None


def find_job_root(job_id: str, scheduler: dict[str, str], workdir: Path | None) -> Path | None:
    bases = [workdir] if workdir is not None else []
    if scheduler.get("WorkDir"):
        bases.append(Path(scheduler["WorkDir"]))
    for base in bases:
        if (base / job_id).is_dir():
            return base / job_id
    return None


def read_job_status(job_id: str, *, workdir: Path | None = None) -> JobStatus:
    if not job_id.isdigit():
        raise BackendError(
            f"{job_id!r} is not a Slurm job id", fix="pass the number sbatch printed"
        )
    scheduler = scontrol_job(job_id)
    job_root = find_job_root(job_id, scheduler, workdir)
    if not scheduler and job_root is None:
        raise BackendError(
            f"Slurm job {job_id} is unknown to scontrol and no job files were found",
            fix="pass --workdir DIR (the submit's work dir); Slurm forgets ended jobs after MinJobAge",
        )
    allocations = read_allocations(job_root) if job_root else ()
    task = allocations[-1].task if allocations and allocations[-1].task != "-" else None
    outcome, outcome_path = last_outcome(job_root, task) if job_root else (None, None)
    return JobStatus(job_id, scheduler, job_root, allocations, outcome, outcome_path)


def log_files(status: JobStatus, *, all_runs: bool = False) -> list[Path]:
    """The batch log, then each task's log (newest run, or every run)."""
    files: list[Path] = []
    stdout = status.scheduler.get("StdOut")
    if stdout and Path(stdout).exists():
        files.append(Path(stdout))
    elif status.job_root is not None:
        batch = status.job_root.parent / f"slurm-{status.job_id}.out"
        if batch.exists():
            files.append(batch)
    if status.job_root is not None:
        runs = allocation_dirs(status.job_root)
        for run in runs if all_runs else runs[-1:]:
            files.extend(sorted(run.glob("tasks/*/task.log")))
    return files
