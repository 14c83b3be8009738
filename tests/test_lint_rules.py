"""Every lint rule: a spec that triggers it (id, severity, path, line, message, fix) and one
that does not. The base spec (``good_workflow``) is the multi-node shape the tutorial
recommends and has no finding at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lint_fixtures import good_workflow, ids, lint_dict, lint_text, only

from workflows.lint import RULE_IDS, Finding

POOL = {"pool_retry_limit": 2}


def _tasks(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return workflow["groups"][0]["tasks"]


def _one(findings: list[Finding], rule_id: str) -> Finding:
    hits = only(findings, rule_id)
    assert len(hits) == 1, [f.format("x") for f in findings]
    return hits[0]


def test_the_good_workflow_has_no_finding(tmp_path: Path) -> None:
    assert lint_dict(good_workflow(), tmp_path, **POOL) == []


def test_every_rule_has_a_test_here() -> None:
    source = Path(__file__).read_text()
    missing = [rule_id for rule_id in RULE_IDS if f'"{rule_id}"' not in source]
    assert not missing


# RS001 ------------------------------------------------------------------------------


def test_rs001_worker_without_the_checkpoint_input(tmp_path: Path) -> None:
    workflow = good_workflow()
    _tasks(workflow)[1]["inputs"] = []
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS001")
    assert finding.severity == "warning"
    assert finding.path == "workflow.groups[0].tasks[1]"
    assert "checkpoint url s3://team/run7 is not an input of task worker_1" in finding.message
    assert "start from step 0" in finding.message
    assert finding.fix.startswith("add `- url: s3://team/run7/models` under the inputs of task worker_1")
    source = (tmp_path / "train.yaml").read_text().splitlines()
    assert source[finding.line - 1].strip() == "- name: worker_1"


def test_rs001_no_task_has_the_input(tmp_path: Path) -> None:
    workflow = good_workflow()
    for task in _tasks(workflow):
        task["inputs"] = [{"url": "s3://team/run7/other"}]
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS001")
    assert [f.path for f in findings] == ["workflow.groups[0].tasks[0]", "workflow.groups[0].tasks[1]"]
    assert "(task master writes it)" in findings[1].message


def test_rs001_trailing_slash_and_parent_url_count_as_inputs(tmp_path: Path) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["checkpoint"][0]["url"] = "s3://team/run7/"
    _tasks(workflow)[0]["inputs"] = [{"url": "s3://team/run7/models/"}]
    _tasks(workflow)[1]["inputs"] = [{"url": "s3://team/run7"}]
    assert "RS001" not in ids(lint_dict(workflow, tmp_path, **POOL))


def test_rs001_the_input_must_be_the_basename_not_the_url_beside_it(tmp_path: Path) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["checkpoint"][0]["path"] = "/tmp/ckpt"  # OSMO writes s3://team/run7/ckpt
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS001")
    assert len(findings) == 2
    assert "`- url: s3://team/run7/ckpt`" in findings[0].fix


def test_rs001_flat_tasks_only_check_themselves(tmp_path: Path) -> None:
    master, worker = _tasks(good_workflow())
    worker["inputs"] = []
    findings = lint_dict({"name": "flat", "tasks": [master, worker]}, tmp_path, **POOL)
    assert "RS001" not in ids(findings)


# RS002 ------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["file:///tmp/ck", "/tmp/ck", "relative/dir"])
def test_rs002_local_urls_are_errors_on_osmo(tmp_path: Path, url: str) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["checkpoint"][0]["url"] = url
    for task in _tasks(workflow):
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
    _tasks(workflow)[0]["checkpoint"][0]["url"] = "file:///tmp/ck"
    for task in _tasks(workflow):
        task["inputs"] = [{"url": "file:///tmp/ck/models"}]
        task["outputs"] = [{"url": "/tmp/out"}]
    assert lint_dict(workflow, tmp_path, target=target) == []


def test_rs002_outputs_are_checked_too(tmp_path: Path) -> None:
    workflow = good_workflow()
    _tasks(workflow)[1]["outputs"] = [{"url": "file:///data/out"}]
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS002")
    assert finding.path == "workflow.groups[0].tasks[1].outputs[0].url"


# RS003 ------------------------------------------------------------------------------


def test_rs003_checkpoint_only_on_a_worker(tmp_path: Path) -> None:
    workflow = good_workflow()
    master, worker = _tasks(workflow)
    worker["checkpoint"] = master.pop("checkpoint")
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS003")
    assert finding.severity == "warning"
    assert finding.path == "workflow.groups[0].tasks[1].checkpoint"
    assert "lead task master" in finding.fix


def test_rs003_checkpoint_on_lead_and_worker_is_fine(tmp_path: Path) -> None:
    workflow = good_workflow()
    master, worker = _tasks(workflow)
    worker["checkpoint"] = master["checkpoint"]
    assert "RS003" not in ids(lint_dict(workflow, tmp_path, **POOL))


# RS004 ------------------------------------------------------------------------------


def test_rs004_info_when_the_pool_limit_is_not_declared(tmp_path: Path) -> None:
    finding = _one(lint_dict(good_workflow(), tmp_path), "RS004")
    assert finding.severity == "info"
    assert "max_retry_per_task > 0" in finding.message
    assert "--pool-retry-limit N" in finding.fix


def test_rs004_warning_when_the_pool_limit_is_zero(tmp_path: Path) -> None:
    finding = _one(lint_dict(good_workflow(), tmp_path, pool_retry_limit=0), "RS004")
    assert finding.severity == "warning"
    assert "never fire" in finding.message


def test_rs004_silent_without_reschedule_or_off_osmo(tmp_path: Path) -> None:
    assert "RS004" not in ids(lint_dict(good_workflow(), tmp_path, target="local"))
    workflow = good_workflow()
    for task in _tasks(workflow):
        task["exitActions"] = {"FAIL": "1-255"}
        task["command"] = ["python", "train.py"]
        task["files"] = []
    assert "RS004" not in ids(lint_dict(workflow, tmp_path))


# RS005 ------------------------------------------------------------------------------


def test_rs005_overlap_names_codes_and_the_winner(tmp_path: Path) -> None:
    workflow = good_workflow()
    for task in _tasks(workflow):
        task["exitActions"] = {"FAIL": "1-10,20", "RESCHEDULE": "3,9-25"}
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS005")
    assert len(findings) == 2
    assert findings[0].severity == "warning"
    assert "exit code(s) 3,9-10,20 of task master are under both FAIL and RESCHEDULE" in findings[0].message
    assert "FAIL wins" in findings[0].message


def test_rs005_disjoint_actions_are_fine(tmp_path: Path) -> None:
    workflow = good_workflow()
    for task in _tasks(workflow):
        task["exitActions"] = {"FAIL": "1-2,4-10", "RESCHEDULE": "3", "COMPLETE": "0"}
    assert "RS005" not in ids(lint_dict(workflow, tmp_path, **POOL))


# RS006 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("codes", "severity", "needle"),
    [
        ("0,3", "error", "exit 0: 0 is success"),
        ("1,3", "warning", "exit 1: 1 is what Python"),
        ("3,16", "info", "EXIT_CODE_RESUME_TO_DISAMBIGUATE"),
        ("3,17", "warning", "EXIT_CODE_FAILED_ON_RESULT_VALIDATION"),
        ("3,93", "warning", "no-restart"),
        ("3,137", "info", "137 (SIGKILL): that is OSMO's documented hang workaround"),
        ("3,143", "info", "143 (SIGTERM)"),
        ("3,139", "warning", "139 SIGSEGV"),
    ],
)
def test_rs006_risky_reschedule_codes(tmp_path: Path, codes: str, severity: str, needle: str) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["exitActions"] = {"RESCHEDULE": codes}
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS006")
    assert finding.severity == severity
    assert needle in finding.message
    assert finding.path == "workflow.groups[0].tasks[0].exitActions.RESCHEDULE"


def test_rs006_a_signal_range_is_one_finding_naming_the_signals(tmp_path: Path) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["exitActions"] = {"RESCHEDULE": "3,130-140"}
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS006")
    assert [f.severity for f in findings] == ["warning", "info"]
    assert "130 SIGINT, 131 SIGQUIT, 132 SIGILL, 133 SIGTRAP and 6 more" in findings[0].message
    assert "130-136,138-140" in findings[0].fix


def test_rs006_ordinary_codes_and_osmo_preemption_are_fine(tmp_path: Path) -> None:
    workflow = good_workflow()
    for task in _tasks(workflow):
        task["exitActions"] = {"RESCHEDULE": "3,42,3004,3006"}
    assert lint_dict(workflow, tmp_path, **POOL) == []


# RS007 ------------------------------------------------------------------------------


def test_rs007_a_code_no_process_can_exit_with(tmp_path: Path) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["exitActions"] = {"RESCHEDULE": "3", "FAIL": "300"}
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS007")
    assert finding.severity == "error"
    assert "arrives as 44" in finding.message
    assert finding.path == "workflow.groups[0].tasks[0].exitActions.FAIL"


def test_rs007_a_range_reaching_past_255_is_a_warning(tmp_path: Path) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["exitActions"] = {"RESCHEDULE": "3", "FAIL": "4-300"}
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS007")
    assert finding.severity == "warning"
    assert "258-300" in finding.message  # 256-257 are OSMO's init codes


# RS008 / RS009 ----------------------------------------------------------------------


def _with_script(workflow: dict[str, Any], script: str, index: int = 0) -> dict[str, Any]:
    _tasks(workflow)[index]["files"][0]["contents"] = script
    return workflow


@pytest.mark.parametrize(
    "script",
    [
        "exec resched wrap --reschedule-code 5 -- torchrun x\n",
        "exec resched wrap --reschedule-code=5 -- torchrun x\n",
        "export RESCHED_RESCHEDULE_CODE=5\nexec resched wrap -- torchrun x\n",
        "exec resched wrap \\\n  --checkpoint-dir /tmp/m \\\n  --reschedule-code '5' -- torchrun x\n",
    ],
)
def test_rs008_wrap_code_not_under_reschedule(tmp_path: Path, script: str) -> None:
    workflow = _with_script(good_workflow(), script)
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS008")
    assert finding.severity == "error"
    assert finding.path == "workflow.groups[0].tasks[0].files[0].contents"
    assert "5 is not under the task's RESCHEDULE (RESCHEDULE: 3)" in finding.message
    assert "add 5 to RESCHEDULE" in finding.fix


def test_rs008_from_the_task_environment_and_the_command(tmp_path: Path) -> None:
    workflow = good_workflow()
    master = _tasks(workflow)[0]
    master["files"] = []
    master["command"] = ["resched", "wrap", "--", "python", "train.py"]
    master["environment"] = {"RESCHED_RESCHEDULE_CODE": 7}
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS008")
    assert finding.path == "workflow.groups[0].tasks[0].command"
    assert "RESCHED_RESCHEDULE_CODE=7" in finding.message


def test_rs008_default_code_3_without_reschedule_is_a_warning(tmp_path: Path) -> None:
    workflow = _with_script(good_workflow(), "exec resched wrap -- torchrun x\n")
    _tasks(workflow)[0]["exitActions"] = {"FAIL": "1-2"}
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS008")
    assert finding.severity == "warning"
    assert "the default --reschedule-code 3" in finding.message
    assert "no RESCHEDULE action" in finding.message


def test_rs008_fail_listed_first_swallows_the_code(tmp_path: Path) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["exitActions"] = {"FAIL": "1-10", "RESCHEDULE": "3"}
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS008")
    assert "exit 3 matches FAIL first (FAIL: 1-10)" in finding.message
    assert "remove it from FAIL" in finding.fix


def test_rs008_matching_code_and_comments_are_fine(tmp_path: Path) -> None:
    script = "# we used to run: resched wrap --reschedule-code 9\nexec resched wrap -- torchrun x\n"
    workflow = _with_script(good_workflow(), script)
    assert lint_dict(workflow, tmp_path, **POOL) == []


def test_rs008_reads_localpath_scripts(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("resched wrap --reschedule-code 4 -- python t.py\n")
    workflow = good_workflow()
    _tasks(workflow)[1]["files"] = [{"path": "/tmp/job/run.sh", "localpath": "run.sh"}]
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS008")
    assert finding.path == "workflow.groups[0].tasks[1].files[0].localpath"


def test_rs008_python_files_are_not_scanned_as_scripts(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text('"""Run me under: resched wrap --reschedule-code 4 -- torchrun"""\n')
    (tmp_path / "run").write_text("#!/usr/bin/env bash\nresched wrap --reschedule-code 4 -- python t.py\n")
    workflow = good_workflow()
    _tasks(workflow)[1]["files"] = [{"path": "/tmp/job/train.py", "localpath": "train.py"}]
    assert lint_dict(workflow, tmp_path, **POOL) == []
    _tasks(workflow)[1]["files"].append({"path": "/tmp/job/run", "localpath": "run"})
    assert _one(lint_dict(workflow, tmp_path, **POOL), "RS008").path.endswith("files[1].localpath")


def test_rs009_abort_code_that_reschedules(tmp_path: Path) -> None:
    workflow = _with_script(good_workflow(), "resched wrap --abort-code 3 -- torchrun x\n")
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS009")
    assert finding.severity == "error"
    assert "--abort-code 3" in finding.message


def test_rs009_default_abort_code_1_under_reschedule(tmp_path: Path) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["exitActions"] = {"RESCHEDULE": "1,3"}
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS009")
    assert "the default --abort-code 1" in finding.message


def test_rs009_abort_code_elsewhere_is_fine(tmp_path: Path) -> None:
    workflow = _with_script(good_workflow(), "resched wrap --abort-code=2 -- torchrun x\n")
    assert lint_dict(workflow, tmp_path, **POOL) == []


# RS010 / RS011 ----------------------------------------------------------------------


def test_rs010_osmo_default_ignore_nonlead_status(tmp_path: Path) -> None:
    workflow = good_workflow()
    del workflow["groups"][0]["ignoreNonleadStatus"]
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS010")
    assert finding.severity == "warning"
    assert finding.path == "workflow.groups[0]"
    assert "OSMO's default is true" in finding.message
    assert "`ignoreNonleadStatus: false`" in finding.fix


def test_rs010_explicit_true_points_at_the_key(tmp_path: Path) -> None:
    workflow = good_workflow()
    workflow["groups"][0]["ignoreNonleadStatus"] = True
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS010")
    assert finding.path == "workflow.groups[0].ignoreNonleadStatus"
    source = (tmp_path / "train.yaml").read_text().splitlines()
    assert source[finding.line - 1].strip() == "ignoreNonleadStatus: true"


def test_rs010_is_an_info_without_reschedule(tmp_path: Path) -> None:
    workflow = good_workflow()
    del workflow["groups"][0]["ignoreNonleadStatus"]
    for task in _tasks(workflow):
        task["exitActions"] = {}
        task["files"] = []
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS010")
    assert finding.severity == "info"
    assert "a failed non-lead task is ignored" in finding.message


def test_rs010_one_task_group_is_fine(tmp_path: Path) -> None:
    workflow = good_workflow()
    group = workflow["groups"][0]
    group["tasks"] = group["tasks"][:1]
    del group["ignoreNonleadStatus"]
    assert lint_dict(workflow, tmp_path, **POOL) == []


def test_rs011_more_than_20_tasks(tmp_path: Path) -> None:
    tasks = [{"name": f"t{i}", "command": ["true"]} for i in range(21)]
    finding = _one(lint_dict({"name": "many", "tasks": tasks}, tmp_path), "RS011")
    assert finding.severity == "warning" and finding.path == "workflow"
    assert "RS011" not in ids(lint_dict({"name": "many", "tasks": tasks[:20]}, tmp_path))


# RS012 ------------------------------------------------------------------------------


@pytest.mark.parametrize("frequency", [10, "10s", "500ms", "PT20S"])
def test_rs012_frequency_below_30s(tmp_path: Path, frequency: Any) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["checkpoint"][0]["frequency"] = frequency
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS012")
    assert finding.path == "workflow.groups[0].tasks[0].checkpoint[0].frequency"


def test_rs012_frequency_not_above_the_write_time(tmp_path: Path) -> None:
    findings = lint_dict(good_workflow(), tmp_path, checkpoint_write_s=400, **POOL)
    finding = _one(findings, "RS012")
    assert "400 s a checkpoint takes to write" in finding.message
    assert "at least 800 s" in finding.fix
    assert lint_dict(good_workflow(), tmp_path, checkpoint_write_s=120, **POOL) == []


@pytest.mark.parametrize("frequency", [30, "1m", "PT5M", "1h"])
def test_rs012_reasonable_frequencies_are_fine(tmp_path: Path, frequency: Any) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["checkpoint"][0]["frequency"] = frequency
    assert lint_dict(workflow, tmp_path, **POOL) == []


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
    finding = _one(lint_text(_SOURCE.format(body=body), tmp_path), "RS013")
    assert finding.severity == "error"
    assert finding.line == 7  # a source line; default-values (line 2) is not OSMO's output
    assert f"write `{token}`" in finding.fix


def test_rs013_tokens_without_spaces_and_other_variables_are_fine(tmp_path: Path) -> None:
    body = "echo {{workflow_id}} {{input:0}} {{host:master}} {{output}} {{uuid}} {{ output_dir }}"
    assert lint_text(_SOURCE.format(body=body), tmp_path) == []


def test_rs014_shell_array_length_outside_raw(tmp_path: Path) -> None:
    finding = _one(lint_text(_SOURCE.format(body="echo ${#arr[@]}"), tmp_path), "RS014")
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
    _tasks(workflow)[0]["files"].append({"path": "/tmp/job/train.py", "localpath": "train.py"})
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS015")
    assert finding.severity == "error"
    assert finding.path == "workflow.groups[0].tasks[0].files[1].localpath"
    assert str(tmp_path / "train.py") in finding.message
    (tmp_path / "train.py").write_text("print('hi')\n")
    assert lint_dict(workflow, tmp_path, **POOL) == []


def test_rs015_localpath_is_relative_to_the_spec_folder(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path.parent)
    workflow = good_workflow()
    _tasks(workflow)[0]["files"].append({"path": "/tmp/job/train.py", "localpath": "train.py"})
    assert lint_dict(workflow, tmp_path, **POOL) == []
    _tasks(workflow)[0]["files"][1]["localpath"] = str(tmp_path)
    assert "is a directory" in _one(lint_dict(workflow, tmp_path, **POOL), "RS015").message


# RS016 ------------------------------------------------------------------------------


def test_rs016_reschedule_without_any_checkpoint(tmp_path: Path) -> None:
    workflow = good_workflow()
    del _tasks(workflow)[0]["checkpoint"]
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS016")
    assert [f.path for f in findings] == [
        "workflow.groups[0].tasks[0].exitActions.RESCHEDULE",
        "workflow.groups[0].tasks[1].exitActions.RESCHEDULE",
    ]
    assert "starts from step 0" in findings[0].message


def test_rs016_wrap_that_owns_the_store_is_fine(tmp_path: Path) -> None:
    script = "resched wrap --checkpoint-url s3://team/run7/store -- torchrun x\n"
    workflow = _with_script(good_workflow(), script)
    del _tasks(workflow)[0]["checkpoint"]
    assert "RS016" not in ids(lint_dict(workflow, tmp_path, **POOL))


# RS017 ------------------------------------------------------------------------------


@pytest.mark.parametrize(("codes", "shown"), [("0-255", "1,129-192"), ("1", "1"), ("0,137", "137")])
def test_rs017_crash_codes_marked_complete(tmp_path: Path, codes: str, shown: str) -> None:
    workflow = good_workflow()
    _tasks(workflow)[0]["exitActions"] = {"RESCHEDULE": "3", "COMPLETE": codes}
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS017")
    assert len(findings) == 1 and findings[0].severity == "warning"
    assert f"ends COMPLETED on exit {shown}" in findings[0].message
    assert findings[0].path == "workflow.groups[0].tasks[0].exitActions.COMPLETE"


def test_rs017_complete_on_0_or_a_dedicated_code_is_fine(tmp_path: Path) -> None:
    workflow = good_workflow()
    for task in _tasks(workflow):
        task["exitActions"] = {"RESCHEDULE": "3", "COMPLETE": "0,42"}
    assert lint_dict(workflow, tmp_path, **POOL) == []


# RS018 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "script",
    [
        "exec resched wrap --checkpoint-dir /tmp/ckpt -- torchrun t.py --checkpoint-dir /tmp/models\n",
        "export RESCHED_CHECKPOINT_DIR=/tmp/ckpt\nexec resched wrap -- torchrun t.py\n",
    ],
)
def test_rs018_checkpoint_path_is_not_where_the_training_writes(tmp_path: Path, script: str) -> None:
    workflow = _with_script(good_workflow(), script)
    finding = _one(lint_dict(workflow, tmp_path, **POOL), "RS018")
    assert finding.severity == "warning"
    assert finding.path == "workflow.groups[0].tasks[0].checkpoint[0].path"
    assert "uploads /tmp/models, but resched wrap's --checkpoint-dir is /tmp/ckpt" in finding.message


@pytest.mark.parametrize("directory", ["/tmp/models", "/tmp/models/", "/tmp/models/run1", "$DIR"])
def test_rs018_same_or_nested_dir_is_fine(tmp_path: Path, directory: str) -> None:
    workflow = _with_script(good_workflow(), f"resched wrap --checkpoint-dir {directory} -- t\n")
    assert lint_dict(workflow, tmp_path, **POOL) == []
