"""values -> render -> parse + validate -> lint: the one path every command takes.

``render``, ``validate``, ``lint``, ``submit`` and ``run`` all load a workflow through
:func:`load_workflow`, so what ``render`` previews is what every backend receives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workflows.lint import Finding, LintOptions, lint_workflow
from workflows.render import Rendered, render_file
from workflows.errors import SpecError
from workflows.spec import Workflow
from workflows.spec_load import parse_workflow
from workflows.values import ValueOptions


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
    for where, problem in rendered.refusals:  # render previews it as OSMO would; never run it
        raise SpecError(problem, where=where, fix="keep only one of the two")
    spec = parse_rendered(rendered)
    opts = lint_options or LintOptions(target=lint_target)
    findings = lint_workflow(rendered, spec, opts)
    return LoadedWorkflow(rendered=rendered, spec=spec, findings=tuple(findings))
