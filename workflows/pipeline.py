"""values -> render -> parse + validate -> lint: the one path every command takes.

``render``, ``validate``, ``lint``, ``submit`` and ``run`` all load a workflow through
:func:`load_workflow`, so what ``render`` previews is what every backend receives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflows import osmo_runtime
from workflows.errors import SpecError, UsageError
from workflows.lint import Finding, LintOptions, lint_workflow
from workflows.render import Rendered, render_file
from workflows.spec import Workflow
from workflows.spec_load import parse_workflow
from workflows.values import ValueOptions

if TYPE_CHECKING:
    from workflows.backends.base import Backend, Request


@dataclass(frozen=True)
class LoadedWorkflow:
    """A rendered, validated and linted workflow, ready for a backend's dry run."""

    rendered: Rendered
    spec: Workflow
    findings: tuple[Finding, ...]

    @property
    def source(self) -> Path | None:
        return self.rendered.source

    @property
    def base_dir(self) -> Path:
        """Where relative ``localpath:`` entries are resolved: the spec file's folder."""
        return self.rendered.source.parent if self.rendered.source else Path.cwd()

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")


def parse_rendered(rendered: Rendered) -> Workflow:
    source = str(rendered.source) if rendered.source else "<string>"
    return parse_workflow(rendered.text, source=source, first_line=rendered.workflow_line)


def load_workflow(
    path: Path,
    options: ValueOptions,
    *,
    lint_target: str = "osmo",
    lint_options: LintOptions | None = None,
) -> LoadedWorkflow:
    """Render ``path`` with ``options``, validate it and lint it for ``lint_target``."""
    rendered = render_file(path, options)
    spec = parse_rendered(rendered)
    opts = lint_options or LintOptions(target=lint_target)
    findings = lint_workflow(rendered, spec, opts)
    return LoadedWorkflow(rendered=rendered, spec=spec, findings=tuple(findings))


def check_runtime(job: LoadedWorkflow, *, other_workflows: bool = False) -> osmo_runtime.WorkflowDag:
    """OSMO's runtime rules that a valid spec can still break: every ``regex:`` compiles,
    and the group DAG from ``inputs: - task:`` has no cycle (nor an input the backend
    cannot order). A problem is one SpecError at ``file:line``, before anything is
    written or started. Returns the DAG."""
    try:
        osmo_runtime.check_patterns(job.spec)
        return osmo_runtime.workflow_dag(job.spec, other_workflows=other_workflows)
    except osmo_runtime.DagError as error:
        from workflows.lint.core import LintContext

        line = LintContext(job.rendered, job.spec, LintOptions()).line_of(error.path)
        source = str(job.source) if job.source else "<spec>"
        where = f"{source}:{line} {error.path}" if line else f"{source} {error.path}"
        raise SpecError(str(error), where=where, fix=error.fix) from None


def lint_gate(job: LoadedWorkflow, *, strict: bool, verb: str = "submit") -> None:
    """Refuse a workflow with lint errors (and, with ``strict``, warnings)."""
    blocking = [f for f in job.findings if f.severity == "error" or (strict and f.severity == "warning")]
    if blocking:
        kinds = "blocking finding(s)" if strict else "error(s)"
        raise UsageError(
            f"refusing to {verb}: lint reported {len(blocking)} {kinds}",
            where=str(job.source) if job.source else None,
            fix="fix the findings above (resched lint shows them again)",
        )


def prepare_request(
    path: Path,
    values: ValueOptions,
    backend: Backend,
    options: Mapping[str, Any],
    *,
    strict: bool = False,
    pool_retry_limit: int | None = None,
    show_findings: Callable[[tuple[Finding, ...]], None] = lambda findings: None,
    verb: str = "submit",
) -> Request:
    """lint gate -> runtime check (regexes, DAG) -> the backend's pure dry run.

    ``backend.submit(request)`` is then the only side effect; ``--dry-run`` prints
    ``request.materialize()``."""
    lint = LintOptions(target=backend.lint_target, pool_retry_limit=pool_retry_limit)
    job = load_workflow(path, values, lint_options=lint)
    show_findings(job.findings)
    lint_gate(job, strict=strict, verb=verb)
    check_runtime(job, other_workflows=not backend.emulates_runtime)
    return backend.dry_run(job, options)  # the backend checks options against its table
