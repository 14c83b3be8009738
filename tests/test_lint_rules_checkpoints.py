"""Lint rules on checkpoints: triggering and non-triggering specs for each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lint_fixtures import (
    POOL,
    good_workflow,
    ids,
    lint_dict,
    only,
    tasks_of,
    the_one,
    with_script,
)

# RS001 ------------------------------------------------------------------------------


def test_rs001_worker_without_the_checkpoint_input(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[1]["inputs"] = []
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS001")
    assert finding.severity == "warning"
    assert finding.path == "workflow.groups[0].tasks[1]"
    assert "checkpoint url s3://team/run7 is not an input of task worker_1" in finding.message
    assert "start from step 0" in finding.message
    assert finding.fix.startswith("add `- url: s3://team/run7/models` under the inputs of task worker_1")
    source = (tmp_path / "train.yaml").read_text().splitlines()
    assert source[finding.line - 1].strip() == "- name: worker_1"


def test_rs001_no_task_has_the_input(tmp_path: Path) -> None:
    workflow = good_workflow()
    for task in tasks_of(workflow):
        task["inputs"] = [{"url": "s3://team/run7/other"}]
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS001")
    assert [f.path for f in findings] == ["workflow.groups[0].tasks[0]", "workflow.groups[0].tasks[1]"]
    assert "(task master writes it)" in findings[1].message


def test_rs001_trailing_slash_and_parent_url_count_as_inputs(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["checkpoint"][0]["url"] = "s3://team/run7/"
    tasks_of(workflow)[0]["inputs"] = [{"url": "s3://team/run7/models/"}]
    tasks_of(workflow)[1]["inputs"] = [{"url": "s3://team/run7"}]
    assert "RS001" not in ids(lint_dict(workflow, tmp_path, **POOL))


def test_rs001_the_input_must_be_the_basename_not_the_url_beside_it(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["checkpoint"][0]["path"] = "/tmp/ckpt"  # OSMO writes s3://team/run7/ckpt
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS001")
    assert len(findings) == 2
    assert "`- url: s3://team/run7/ckpt`" in findings[0].fix


def test_rs001_flat_tasks_only_check_themselves(tmp_path: Path) -> None:
    master, worker = tasks_of(good_workflow())
    worker["inputs"] = []
    findings = lint_dict({"name": "flat", "tasks": [master, worker]}, tmp_path, **POOL)
    assert "RS001" not in ids(findings)


# RS003 ------------------------------------------------------------------------------


def test_rs003_checkpoint_only_on_a_worker(tmp_path: Path) -> None:
    workflow = good_workflow()
    master, worker = tasks_of(workflow)
    worker["checkpoint"] = master.pop("checkpoint")
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS003")
    assert finding.severity == "warning"
    assert finding.path == "workflow.groups[0].tasks[1].checkpoint"
    assert "lead task master" in finding.fix


def test_rs003_checkpoint_on_lead_and_worker_is_fine(tmp_path: Path) -> None:
    workflow = good_workflow()
    master, worker = tasks_of(workflow)
    worker["checkpoint"] = master["checkpoint"]
    assert "RS003" not in ids(lint_dict(workflow, tmp_path, **POOL))


# RS012 ------------------------------------------------------------------------------


@pytest.mark.parametrize("frequency", [10, "10s", "500ms", "PT20S"])
def test_rs012_frequency_below_30s(tmp_path: Path, frequency: Any) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["checkpoint"][0]["frequency"] = frequency
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS012")
    assert finding.path == "workflow.groups[0].tasks[0].checkpoint[0].frequency"


def test_rs012_frequency_not_above_the_write_time(tmp_path: Path) -> None:
    findings = lint_dict(good_workflow(), tmp_path, checkpoint_write_s=400, **POOL)
    finding = the_one(findings, "RS012")
    assert "400 s a checkpoint takes to write" in finding.message
    assert "at least 800 s" in finding.fix
    assert lint_dict(good_workflow(), tmp_path, checkpoint_write_s=120, **POOL) == []


@pytest.mark.parametrize("frequency", [30, "1m", "PT5M", "1h"])
def test_rs012_reasonable_frequencies_are_fine(tmp_path: Path, frequency: Any) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["checkpoint"][0]["frequency"] = frequency
    assert lint_dict(workflow, tmp_path, **POOL) == []


# RS016 ------------------------------------------------------------------------------


def test_rs016_reschedule_without_any_checkpoint(tmp_path: Path) -> None:
    workflow = good_workflow()
    del tasks_of(workflow)[0]["checkpoint"]
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS016")
    assert [f.path for f in findings] == [
        "workflow.groups[0].tasks[0].exitActions.RESCHEDULE",
        "workflow.groups[0].tasks[1].exitActions.RESCHEDULE",
    ]
    assert "starts from step 0" in findings[0].message


def test_rs016_wrap_that_owns_the_store_is_fine(tmp_path: Path) -> None:
    script = "resched wrap --checkpoint-url s3://team/run7/store -- torchrun x\n"
    workflow = with_script(good_workflow(), script)
    del tasks_of(workflow)[0]["checkpoint"]
    assert "RS016" not in ids(lint_dict(workflow, tmp_path, **POOL))


# RS018 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "script",
    [
        "exec resched wrap --checkpoint-dir /tmp/ckpt -- torchrun t.py --checkpoint-dir /tmp/models\n",
        "export RESCHED_CHECKPOINT_DIR=/tmp/ckpt\nexec resched wrap -- torchrun t.py\n",
    ],
)
def test_rs018_checkpoint_path_is_not_where_the_training_writes(tmp_path: Path, script: str) -> None:
    workflow = with_script(good_workflow(), script)
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS018")
    assert finding.severity == "warning"
    assert finding.path == "workflow.groups[0].tasks[0].checkpoint[0].path"
    assert "uploads /tmp/models, but resched wrap's --checkpoint-dir is /tmp/ckpt" in finding.message


@pytest.mark.parametrize("directory", ["/tmp/models", "/tmp/models/", "/tmp/models/run1", "$DIR"])
def test_rs018_same_or_nested_dir_is_fine(tmp_path: Path, directory: str) -> None:
    workflow = with_script(good_workflow(), f"resched wrap --checkpoint-dir {directory} -- t\n")
    assert lint_dict(workflow, tmp_path, **POOL) == []
