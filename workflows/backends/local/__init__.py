"""The embedded ``local`` backend: run a workflow on this machine with OSMO's semantics.

``dry_run`` builds a :class:`LocalPlan` (pure); ``submit`` executes it and returns the
final line (``COMPLETED in 3m12s: 1 fault, ...``) with exit code 0 only for COMPLETED.
``resched run`` and ``resched submit --backend local`` both come here.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflows.backends.base import Backend, Request, SubmitResult
from workflows.backends.options import BackendOption, OptionType, parse_options
from workflows.backends.local.chaos import parse_chaos
from workflows.backends.local.plan import LocalOptions, LocalPlan, build_plan
from wrapper.redact import redact_data

if TYPE_CHECKING:
    from workflows.pipeline import LoadedWorkflow

__all__ = ["LocalBackend", "LocalOptions", "LocalPlan", "local_options", "new_run_id"]

DEFAULT_MAX_RETRY_PER_TASK = 3
DEFAULT_RUNS_DIR = Path(".resched") / "runs"


def new_run_id(workflow_name: str) -> str:
    return f"{workflow_name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


OPTIONS = (
    BackendOption("chaos", OptionType.TEXT, "fault injection, e.g. 'kill:master@20s,exit:master=16@50s', "
                  "'@3ckpt', '@500step' or 'random:mtbf=30s,seed=1'"),
    BackendOption("max_retry_per_task", OptionType.INT, "RESCHEDULEs a task gets (OSMO's pool setting; "
                  "OSMO's own default is 0)", default=DEFAULT_MAX_RETRY_PER_TASK, minimum=0),
    BackendOption("workdir", OptionType.PATH, f"where pods, logs and staged inputs go "
                  f"(default {DEFAULT_RUNS_DIR}/<run id>)", path_kind="dir"),
    BackendOption("report", OptionType.PATH, "write the JSON report (attempts, timeline events, "
                  "derived numbers) here (default <workdir>/report.json)", path_kind="file"),
    BackendOption("progress", OptionType.CHOICE, "live lines on a terminal, plain lines otherwise",
                  default="auto", choices=("auto", "tty", "plain", "quiet")),
)
_INTERNAL = ("run_id", "stop_grace_s")  # set by tests and callers, not flags


def local_options(options: Mapping[str, Any]) -> LocalOptions:
    """Check and convert backend options (``submit`` passes a plain mapping)."""
    opts = parse_options(OPTIONS, {k: v for k, v in options.items() if k not in _INTERNAL}, "local")
    return LocalOptions(
        chaos=opts["chaos"],
        max_retry_per_task=opts["max_retry_per_task"],
        workdir=opts["workdir"],
        report=opts["report"],
        progress=opts["progress"],
        stop_grace_s=float(options.get("stop_grace_s") or LocalOptions.stop_grace_s),
    )


class LocalBackend(Backend):
    name = "local"
    lint_target = "local"
    options = OPTIONS

    def dry_run(self, job: LoadedWorkflow, options: Mapping[str, Any]) -> LocalPlan:
        opts = local_options(options)
        spec = job.spec
        parse_chaos(opts.chaos, [t.name for t in spec.all_tasks()])  # a bad spec fails here
        run_id = str(options.get("run_id") or new_run_id(spec.name))
        workdir = (opts.workdir or DEFAULT_RUNS_DIR / run_id).absolute()
        return build_plan(spec, opts, run_id=run_id, workdir=workdir, base_dir=job.base_dir)

    def submit(self, request: Request) -> SubmitResult:
        if not isinstance(request, LocalPlan):
            raise TypeError("the local backend submits a LocalPlan")
        report = execute(request)
        return SubmitResult(backend=self.name, job_id=request.run_id, message=report["summary"],
                            exit_code=0 if report["status"] == "COMPLETED" else 1)


def execute(plan: LocalPlan) -> dict[str, Any]:
    """Run ``plan``; print progress and the per-attempt report; write ``--report``."""
    from workflows.backends.local.executor import Executor
    from workflows.backends.local.progress import Progress
    from workflows.backends.local.summary import build_report, report_lines

    progress = Progress(plan.options.progress)
    executor = Executor(plan, progress)
    try:
        result = executor.run()
    finally:
        progress.close()
    report = build_report(plan, result, executor.timeline.events)
    for line in report_lines(report):
        progress.line(line)
    # The run directory always holds its report (``resched report RUN_DIR`` reads it);
    # ``--report FILE`` writes a copy where the user asked.
    text = json.dumps(redact_data(json.loads(json.dumps(report, default=str))), indent=2) + "\n"
    for path in dict.fromkeys((plan.workdir / "report.json", plan.options.report or plan.workdir / "report.json")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        progress.line(f"report: {path}")
    progress.line(f"html: resched report {plan.workdir} --html {plan.workdir / 'report.html'}")
    return report
