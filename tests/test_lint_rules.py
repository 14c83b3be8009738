"""Lint rules on urls, groups, size, source text and local files: a spec that triggers each
rule (id, severity, path, line, message, fix) and one that does not. The base spec
(``good_workflow``) is the multi-node shape the tutorial recommends and has no finding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lint_fixtures import (
    POOL,
    good_workflow,
    ids,
    lint_dict,
    lint_text,
    only,
    tasks_of,
    the_one,
)

from workflows.lint import RULE_IDS


def test_the_good_workflow_has_no_finding(tmp_path: Path) -> None:
    assert lint_dict(good_workflow(), tmp_path, **POOL) == []


def test_every_rule_has_a_test() -> None:
    sources = "".join(p.read_text() for p in Path(__file__).parent.glob("test_lint_rules*.py"))
    missing = [rule_id for rule_id in RULE_IDS if f'"{rule_id}"' not in sources]
    assert not missing


# RS002 ------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["file:///tmp/ck", "/tmp/ck", "relative/dir"])
def test_rs002_local_urls_are_errors_on_osmo(tmp_path: Path, url: str) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["checkpoint"][0]["url"] = url
    for task in tasks_of(workflow):
        task["inputs"] = [{"url": f"{url}/models"}]
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS002")
    assert {f.severity for f in findings} == {"error"}
    assert sorted(f.path for f in findings) == [
        "workflow.groups[0].tasks[0].checkpoint[0].url",
        "workflow.groups[0].tasks[0].inputs[0].url",
        "workflow.groups[0].tasks[1].inputs[0].url",
    ]
    assert "s3://" in findings[0].fix


@pytest.mark.parametrize("target", ["local", "slurm"])
def test_rs002_local_urls_are_fine_for_local_and_slurm(tmp_path: Path, target: str) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["checkpoint"][0]["url"] = "file:///tmp/ck"
    for task in tasks_of(workflow):
        task["inputs"] = [{"url": "file:///tmp/ck/models"}]
        task["outputs"] = [{"url": "/tmp/out"}]
    assert lint_dict(workflow, tmp_path, target=target) == []


def test_rs002_outputs_are_checked_too(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[1]["outputs"] = [{"url": "file:///data/out"}]
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS002")
    assert finding.path == "workflow.groups[0].tasks[1].outputs[0].url"


# RS010 / RS011 ----------------------------------------------------------------------


def test_rs010_osmo_default_ignore_nonlead_status(tmp_path: Path) -> None:
    workflow = good_workflow()
    del workflow["groups"][0]["ignoreNonleadStatus"]
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS010")
    assert finding.severity == "warning"
    assert finding.path == "workflow.groups[0]"
    assert "OSMO's default is true" in finding.message
    assert "`ignoreNonleadStatus: false`" in finding.fix


def test_rs010_explicit_true_points_at_the_key(tmp_path: Path) -> None:
    workflow = good_workflow()
    workflow["groups"][0]["ignoreNonleadStatus"] = True
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS010")
    assert finding.path == "workflow.groups[0].ignoreNonleadStatus"
    source = (tmp_path / "train.yaml").read_text().splitlines()
    assert source[finding.line - 1].strip() == "ignoreNonleadStatus: true"


def test_rs010_is_an_info_without_reschedule(tmp_path: Path) -> None:
    workflow = good_workflow()
    del workflow["groups"][0]["ignoreNonleadStatus"]
    for task in tasks_of(workflow):
        task["exitActions"] = {}
        task["files"] = []
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS010")
    assert finding.severity == "info"
    assert "a failed non-lead task is ignored" in finding.message


def test_rs010_one_task_group_is_fine(tmp_path: Path) -> None:
    workflow = good_workflow()
    group = workflow["groups"][0]
    group["tasks"] = group["tasks"][:1]
    del group["ignoreNonleadStatus"]
    assert lint_dict(workflow, tmp_path, **POOL) == []


def test_rs011_more_than_20tasks_of(tmp_path: Path) -> None:
    tasks = [{"name": f"t{i}", "command": ["true"]} for i in range(21)]
    finding = the_one(lint_dict({"name": "many", "tasks": tasks}, tmp_path), "RS011")
    assert finding.severity == "warning" and finding.path == "workflow"
    assert "RS011" not in ids(lint_dict({"name": "many", "tasks": tasks[:20]}, tmp_path))


# RS013 / RS014 (source text) --------------------------------------------------------

_SOURCE = """\
default-values:
  note: "{{ workflow_id }} in default-values is not rendered"
workflow:
  name: text
  tasks:
  - name: t
    command: ["bash", "-c", "{body}"]
"""


@pytest.mark.parametrize(
    ("body", "token"),
    [
        ("echo {{ workflow_id }}", "{{workflow_id}}"),
        ("echo {{workflow_id }}", "{{workflow_id}}"),
        ("ls {{ input:0 }}", "{{input:0}}"),
        ("ping {{ host:master }}", "{{host:master}}"),
        ("cp x {{ output}}", "{{output}}"),
    ],
)
def test_rs013_runtime_token_with_spaces(tmp_path: Path, body: str, token: str) -> None:
    finding = the_one(lint_text(_SOURCE.format(body=body), tmp_path), "RS013")
    assert finding.severity == "error"
    assert finding.line == 7  # a source line; default-values (line 2) is not OSMO's output
    assert f"write `{token}`" in finding.fix


def test_rs013_tokens_without_spaces_and_other_variables_are_fine(tmp_path: Path) -> None:
    body = "echo {{workflow_id}} {{input:0}} {{host:master}} {{output}} {{uuid}} {{ output_dir }}"
    assert lint_text(_SOURCE.format(body=body), tmp_path) == []


def test_rs014_shell_array_length_outside_raw(tmp_path: Path) -> None:
    finding = the_one(lint_text(_SOURCE.format(body="echo ${#arr[@]}"), tmp_path), "RS014")
    assert finding.severity == "error" and finding.line == 7
    assert "{% raw %}" in finding.fix


def test_rs014_unclosed_comment_start(tmp_path: Path) -> None:
    assert "RS014" in ids(lint_text(_SOURCE.format(body="echo {#x"), tmp_path))


def test_rs014_raw_blocks_and_real_jinja_comments_are_fine(tmp_path: Path) -> None:
    raw = "{% raw %}echo ${#arr[@]}{% endraw %}"
    assert lint_text(_SOURCE.format(body=raw), tmp_path) == []
    spaced_raw = "{%- raw -%}echo ${#arr[@]}{%- endraw -%}"
    assert lint_text(_SOURCE.format(body=spaced_raw), tmp_path) == []
    assert lint_text(_SOURCE.format(body="echo hi {# a note for readers #}"), tmp_path) == []


# RS015 ------------------------------------------------------------------------------


def test_rs015_missing_localpath(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["files"].append({"path": "/tmp/job/train.py", "localpath": "train.py"})
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS015")
    assert finding.severity == "error"
    assert finding.path == "workflow.groups[0].tasks[0].files[1].localpath"
    assert str(tmp_path / "train.py") in finding.message
    (tmp_path / "train.py").write_text("print('hi')\n")
    assert lint_dict(workflow, tmp_path, **POOL) == []


def test_rs015_localpath_is_relative_to_the_spec_folder(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path.parent)
    workflow = good_workflow()
    tasks_of(workflow)[0]["files"].append({"path": "/tmp/job/train.py", "localpath": "train.py"})
    assert lint_dict(workflow, tmp_path, **POOL) == []
    tasks_of(workflow)[0]["files"][1]["localpath"] = str(tmp_path)
    assert "is a directory" in the_one(lint_dict(workflow, tmp_path, **POOL), "RS015").message
