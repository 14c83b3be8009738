"""Lint plumbing: Finding forms, ordering, line mapping through Jinja, the wrap scanner,
the interval arithmetic behind the exit-code rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from lint_fixtures import good_workflow, lint_dict

from workflows.errors import UsageError
from workflows.lint import Finding, LintOptions, lint_workflow
from workflows.lint.codes import format_intervals, intersect, merge, signal_name, subtract
from workflows.lint.core import task_sites
from workflows.lint.locate import LineMapper
from workflows.lint.wrap_scan import wrap_calls
from workflows.pipeline import parse_rendered
from workflows.render import render_file
from workflows.spec_load import parse_workflow
from workflows.values import ValueOptions

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def test_finding_text_form() -> None:
    finding = Finding("RS001", "warning", "workflow.tasks[0]", "msg", "do this", 12)
    assert finding.format("train.yaml") == (
        "warning RS001 workflow.tasks[0]: msg (train.yaml:12)\n        fix: do this"
    )
    info = Finding("RS004", "info", "workflow", "m", "f")
    assert info.format("x").startswith("info    RS004 workflow: m\n")
    assert info.to_json() == {
        "id": "RS004", "severity": "info", "path": "workflow", "line": None, "message": "m", "fix": "f"
    }


def test_findings_are_sorted_errors_first_then_by_line(tmp_path: Path) -> None:
    workflow = good_workflow()
    del workflow["groups"][0]["ignoreNonleadStatus"]  # warning, early line
    workflow["groups"][0]["tasks"][1]["outputs"] = [{"url": "/tmp/out"}]  # error, late line
    findings = lint_dict(workflow, tmp_path)
    severities = [f.severity for f in findings]
    assert severities == sorted(severities, key=["error", "warning", "info"].index)
    assert findings[0].id == "RS002"


def test_unknown_target_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown lint target 'k8s'"):
        lint_dict(good_workflow(), tmp_path, target="k8s")


def test_task_sites_for_groups_and_flat_tasks() -> None:
    grouped = parse_workflow("workflow:\n  name: w\n  groups:\n  - name: g\n    tasks: [{name: a, command: [x]}]\n")
    assert [(s.path, s.group_path, s.grouped) for s in task_sites(grouped)] == [
        ("workflow.groups[0].tasks[0]", "workflow.groups[0]", True)
    ]
    flat = parse_workflow("workflow:\n  name: w\n  tasks: [{name: a, command: [x]}, {name: b, command: [y]}]\n")
    sites = task_sites(flat)
    assert [(s.path, s.group.name, s.grouped) for s in sites] == [
        ("workflow.tasks[0]", "a-group", False), ("workflow.tasks[1]", "b-group", False)
    ]


# line mapping ------------------------------------------------------------------------


def test_line_mapper_through_a_jinja_loop() -> None:
    source = (
        "default-values:\n  n: 3\n"           # 1-2
        "workflow:\n"                          # 3
        "  name: w\n"                          # 4
        "  tasks:\n"                           # 5
        "{%- for i in range(n) %}\n"           # 6
        "  - name: t{{ i }}\n"                 # 7
        "    command: [x]\n"                   # 8
        "{%- endfor %}\n"                      # 9
        "  pool: p\n"                          # 10
    )
    rendered = (
        "workflow:\n  name: w\n  tasks:\n"
        "  - name: t0\n    command: [x]\n"
        "  - name: t1\n    command: [x]\n"
        "  - name: t2\n    command: [x]\n"
        "  pool: p"
    )
    mapper = LineMapper(rendered, source, 3)
    assert [mapper.source_line(n) for n in range(1, 11)] == [3, 4, 5, 7, 8, 7, 8, 7, 8, 10]


def test_lint_lines_point_into_the_template_loop(tmp_path: Path) -> None:
    options = ValueOptions(sets=("upload_location=s3://t/r", "n_nodes=6"))
    template = TEMPLATES / "multi-node-torchrun.yaml"
    rendered = render_file(template, options)
    findings = lint_workflow(rendered, parse_rendered(rendered), LintOptions(checkpoint_write_s=900))
    source = template.read_text().splitlines()
    total = len(source)
    for finding in findings:
        assert finding.line is not None and 1 <= finding.line <= total
    rs012 = next(f for f in findings if f.id == "RS012")
    assert source[rs012.line - 1].strip().startswith("frequency:")
    rs004 = next(f for f in findings if f.id == "RS004")
    assert source[rs004.line - 1].strip().startswith("RESCHEDULE:")


# wrap scanner ------------------------------------------------------------------------


def _site(command: str, env: str = "") -> object:
    text = f"workflow:\n  name: w\n  tasks:\n  - name: a\n    command: ['bash', '-c', {command!r}]\n{env}"
    return task_sites(parse_workflow(text))[0]


@pytest.mark.parametrize(
    ("command", "env", "expected"),
    [
        ("resched wrap -- x", "", (3, "default", 1, "default", False)),
        ("resched wrap --reschedule-code 9 --abort-code=2 -- x", "", (9, "flag", 2, "flag", False)),
        ("resched wrap --reschedule-code $CODE -- x", "", (None, "flag", 1, "default", False)),
        ("resched wrap -- x", "    environment: {RESCHED_RESCHEDULE_CODE: 5}\n", (5, "env", 1, "default", False)),
        ("RESCHED_RESCHEDULE_CODE=6 resched wrap -- x", "    environment: {RESCHED_RESCHEDULE_CODE: 5}\n",
         (6, "env", 1, "default", False)),
        ("resched wrap --checkpoint-url s3://b/c -- x", "", (3, "default", 1, "default", True)),
        ("resched wrap -- x --reschedule-code 9", "", (3, "default", 1, "default", False)),
    ],
)
def test_wrap_scanner(command: str, env: str, expected: tuple[object, ...]) -> None:
    (call,) = wrap_calls(_site(command, env), Path("."))  # type: ignore[arg-type]
    got = (call.reschedule_code, call.reschedule_from, call.abort_code, call.abort_from, call.checkpoint_url)
    assert got == expected


def test_no_wrap_no_calls() -> None:
    assert wrap_calls(_site("torchrun x  # resched wrapped later"), Path(".")) == ()  # type: ignore[arg-type]


# intervals ---------------------------------------------------------------------------


def test_interval_arithmetic() -> None:
    assert merge([(5, 6), (1, 3), (4, 4)]) == [(1, 6)]
    assert intersect([(1, 10), (20, 30)], [(5, 25)]) == [(5, 10), (20, 25)]
    assert subtract([(256, 3010)], [(256, 257), (2002, 2040), (3000, 3006)]) == [
        (258, 2001), (2041, 2999), (3007, 3010)
    ]
    assert format_intervals([(3, 3), (9, 10)]) == "3,9-10"
    assert signal_name(137) == "SIGKILL" and signal_name(143) == "SIGTERM"
    assert signal_name(192).startswith("SIG") or signal_name(192) == "signal 64"
