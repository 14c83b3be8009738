"""Helpers for the lint and spec tests: build a Rendered from plain YAML and lint it.

The specs here contain no Jinja, so the rendered text IS the workflow section of the
source; ``workflow_line`` is where ``workflow:`` starts in the file.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from workflows.lint import Finding, LintOptions, lint_workflow
from workflows.render import Rendered
from workflows.spec import Workflow
from workflows.spec_load import parse_workflow

FIXTURES = Path(__file__).parent

def rendered_from(source_text: str, source: Path | None = None) -> Rendered:
    """A Rendered for Jinja-free source text: the workflow section, as OSMO cuts it."""
    lines = source_text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("workflow:"))
    end = next(
        (
            j
            for j in range(start + 1, len(lines))
            if lines[j][:1].isalpha() and ":" in lines[j].split()[0]
        ),
        len(lines),
    )
    text = "".join(lines[start:end]).removesuffix("\n")
    return Rendered(
        source=source, source_text=source_text, text=text, workflow_line=start + 1, values={}
    )


def spec_of(text: str) -> Workflow:
    return parse_workflow(textwrap.dedent(text))


def lint_text(
    text: str, tmp_path: Path, *, name: str = "train.yaml", **options: Any
) -> list[Finding]:
    """Write ``text`` to tmp_path/name, 'render' it (no Jinja), validate and lint it."""
    source_text = textwrap.dedent(text).lstrip("\n")
    source = tmp_path / name
    source.write_text(source_text)
    rendered = rendered_from(source_text, source)
    spec = parse_workflow(rendered.text, source=str(source), first_line=rendered.workflow_line)
    return lint_workflow(rendered, spec, LintOptions(**options))


def ids(findings: list[Finding]) -> list[str]:
    return [f.id for f in findings]


def only(findings: list[Finding], rule_id: str) -> list[Finding]:
    return [f for f in findings if f.id == rule_id]


def good_workflow() -> dict[str, Any]:
    """A multi-node workflow with no lint finding (given --pool-retry-limit > 0)."""

    def task(name: str, lead: bool) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": name,
            "lead": lead,
            # built from docker/Dockerfile: the name says it has resched (RS019)
            "image": "registry.example/team/resched-pytorch:25.01-py3",
            "command": ["bash", "/tmp/job/run.sh"],
            "files": [
                {
                    "path": "/tmp/job/run.sh",
                    "contents": "#!/bin/bash\n"
                    "exec resched wrap --reschedule-code 3 --checkpoint-dir /tmp/models -- \\\n"
                    "  torchrun --nnodes 2 /tmp/job/train.py\n",
                }
            ],
            "inputs": [{"url": "s3://team/run7/models"}],
            "exitActions": {"RESCHEDULE": "3"},
        }
        if lead:
            data["checkpoint"] = [
                {"path": "/tmp/models", "url": "s3://team/run7", "frequency": "5m"}
            ]
        return data

    return {
        "name": "train",
        "groups": [
            {
                "name": "training",
                "ignoreNonleadStatus": False,
                "tasks": [task("master", True), task("worker_1", False)],
            }
        ],
    }


def dump_workflow(workflow: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump({"workflow": workflow}, sort_keys=False)


def lint_dict(workflow: dict[str, Any], tmp_path: Path, **options: Any) -> list[Finding]:
    return lint_text(dump_workflow(workflow), tmp_path, **options)


POOL: dict[str, Any] = {"pool_retry_limit": 2}


def tasks_of(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return workflow["groups"][0]["tasks"]  # type: ignore[no-any-return]


def the_one(findings: list[Finding], rule_id: str) -> Finding:
    hits = only(findings, rule_id)
    assert len(hits) == 1, [f.format("x") for f in findings]
    return hits[0]


def with_script(workflow: dict[str, Any], script: str, index: int = 0) -> dict[str, Any]:
    """Replace the run.sh contents of task ``index`` of the good workflow."""
    tasks_of(workflow)[index]["files"][0]["contents"] = script
    return workflow
