"""Lint rules on exit codes and resched wrap codes: triggering and non-triggering specs."""

from __future__ import annotations

from pathlib import Path

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

# RS004 ------------------------------------------------------------------------------


def test_rs004_info_when_the_pool_limit_is_not_declared(tmp_path: Path) -> None:
    finding = the_one(lint_dict(good_workflow(), tmp_path), "RS004")
    assert finding.severity == "info"
    assert "max_retry_per_task > 0" in finding.message
    assert "--pool-retry-limit N" in finding.fix


def test_rs004_warning_when_the_pool_limit_is_zero(tmp_path: Path) -> None:
    finding = the_one(lint_dict(good_workflow(), tmp_path, pool_retry_limit=0), "RS004")
    assert finding.severity == "warning"
    assert "never fire" in finding.message


def test_rs004_silent_without_reschedule_or_off_osmo(tmp_path: Path) -> None:
    assert "RS004" not in ids(lint_dict(good_workflow(), tmp_path, target="local"))
    workflow = good_workflow()
    for task in tasks_of(workflow):
        task["exitActions"] = {"FAIL": "1-255"}
        task["command"] = ["python", "train.py"]
        task["files"] = []
    assert "RS004" not in ids(lint_dict(workflow, tmp_path))


# RS005 ------------------------------------------------------------------------------


def test_rs005_overlap_names_codes_and_the_winner(tmp_path: Path) -> None:
    workflow = good_workflow()
    for task in tasks_of(workflow):
        task["exitActions"] = {"FAIL": "1-10,20", "RESCHEDULE": "3,9-25"}
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS005")
    assert len(findings) == 2
    assert findings[0].severity == "warning"
    assert "exit code(s) 3,9-10,20 of task master are under both FAIL and RESCHEDULE" in findings[0].message
    assert "FAIL wins" in findings[0].message


def test_rs005_disjoint_actions_are_fine(tmp_path: Path) -> None:
    workflow = good_workflow()
    for task in tasks_of(workflow):
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
    tasks_of(workflow)[0]["exitActions"] = {"RESCHEDULE": codes}
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS006")
    assert finding.severity == severity
    assert needle in finding.message
    assert finding.path == "workflow.groups[0].tasks[0].exitActions.RESCHEDULE"


def test_rs006_a_signal_range_is_one_finding_naming_the_signals(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["exitActions"] = {"RESCHEDULE": "3,130-140"}
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS006")
    assert [f.severity for f in findings] == ["warning", "info"]
    assert "130 SIGINT, 131 SIGQUIT, 132 SIGILL, 133 SIGTRAP and 6 more" in findings[0].message
    assert "130-136,138-140" in findings[0].fix


def test_rs006_ordinary_codes_and_osmo_preemption_are_fine(tmp_path: Path) -> None:
    workflow = good_workflow()
    for task in tasks_of(workflow):
        task["exitActions"] = {"RESCHEDULE": "3,42,3004,3006"}
    assert lint_dict(workflow, tmp_path, **POOL) == []


# RS007 ------------------------------------------------------------------------------


def test_rs007_a_code_no_process_can_exit_with(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["exitActions"] = {"RESCHEDULE": "3", "FAIL": "300"}
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS007")
    assert finding.severity == "error"
    assert "arrives as 44" in finding.message
    assert finding.path == "workflow.groups[0].tasks[0].exitActions.FAIL"


def test_rs007_a_listed_code_beside_valid_ones_is_still_an_error(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["exitActions"] = {"RESCHEDULE": "3,300,3006"}
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS007")
    assert finding.severity == "error"
    assert "code(s) 300 " in finding.message


def test_rs007_a_range_reaching_past_255_is_a_warning(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["exitActions"] = {"RESCHEDULE": "3", "FAIL": "4-300"}
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS007")
    assert finding.severity == "warning"
    assert "258-300" in finding.message  # 256-257 are OSMO's init codes


# RS008 / RS009 ----------------------------------------------------------------------


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
    workflow = with_script(good_workflow(), script)
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS008")
    assert finding.severity == "error"
    assert finding.path == "workflow.groups[0].tasks[0].files[0].contents"
    assert "5 is not under the task's RESCHEDULE (RESCHEDULE: 3)" in finding.message
    assert "add 5 to RESCHEDULE" in finding.fix


def test_rs008_from_the_task_environment_and_the_command(tmp_path: Path) -> None:
    workflow = good_workflow()
    master = tasks_of(workflow)[0]
    master["files"] = []
    master["command"] = ["resched", "wrap", "--", "python", "train.py"]
    master["environment"] = {"RESCHED_RESCHEDULE_CODE": 7}
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS008")
    assert finding.path == "workflow.groups[0].tasks[0].command"
    assert "RESCHED_RESCHEDULE_CODE=7" in finding.message


def test_rs008_default_code_3_without_reschedule_is_a_warning(tmp_path: Path) -> None:
    workflow = with_script(good_workflow(), "exec resched wrap -- torchrun x\n")
    tasks_of(workflow)[0]["exitActions"] = {"FAIL": "1-2"}
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS008")
    assert finding.severity == "warning"
    assert "the default --reschedule-code 3" in finding.message
    assert "no RESCHEDULE action" in finding.message


def test_rs008_fail_listed_first_swallows_the_code(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["exitActions"] = {"FAIL": "1-10", "RESCHEDULE": "3"}
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS008")
    assert "exit 3 matches FAIL first (FAIL: 1-10)" in finding.message
    assert "remove it from FAIL" in finding.fix


def test_rs008_matching_code_and_comments_are_fine(tmp_path: Path) -> None:
    script = "# we used to run: resched wrap --reschedule-code 9\nexec resched wrap -- torchrun x\n"
    workflow = with_script(good_workflow(), script)
    assert lint_dict(workflow, tmp_path, **POOL) == []


def test_rs008_reads_localpath_scripts(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("resched wrap --reschedule-code 4 -- python t.py\n")
    workflow = good_workflow()
    tasks_of(workflow)[1]["files"] = [{"path": "/tmp/job/run.sh", "localpath": "run.sh"}]
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS008")
    assert finding.path == "workflow.groups[0].tasks[1].files[0].localpath"


def test_rs008_python_files_are_not_scanned_as_scripts(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text('"""Run me under: resched wrap --reschedule-code 4 -- torchrun"""\n')
    (tmp_path / "run").write_text("#!/usr/bin/env bash\nresched wrap --reschedule-code 4 -- python t.py\n")
    workflow = good_workflow()
    tasks_of(workflow)[1]["files"] = [{"path": "/tmp/job/train.py", "localpath": "train.py"}]
    assert lint_dict(workflow, tmp_path, **POOL) == []
    tasks_of(workflow)[1]["files"].append({"path": "/tmp/job/run", "localpath": "run"})
    assert the_one(lint_dict(workflow, tmp_path, **POOL), "RS008").path.endswith("files[1].localpath")


def test_rs009_abort_code_that_reschedules(tmp_path: Path) -> None:
    workflow = with_script(good_workflow(), "resched wrap --abort-code 3 -- torchrun x\n")
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS009")
    assert finding.severity == "error"
    assert "--abort-code 3" in finding.message


def test_rs009_default_abort_code_1_under_reschedule(tmp_path: Path) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["exitActions"] = {"RESCHEDULE": "1,3"}
    finding = the_one(lint_dict(workflow, tmp_path, **POOL), "RS009")
    assert "the default --abort-code 1" in finding.message


def test_rs009_abort_code_elsewhere_is_fine(tmp_path: Path) -> None:
    workflow = with_script(good_workflow(), "resched wrap --abort-code=2 -- torchrun x\n")
    assert lint_dict(workflow, tmp_path, **POOL) == []


# RS017 ------------------------------------------------------------------------------


@pytest.mark.parametrize(("codes", "shown"), [("0-255", "1,129-192"), ("1", "1"), ("0,137", "137")])
def test_rs017_crash_codes_marked_complete(tmp_path: Path, codes: str, shown: str) -> None:
    workflow = good_workflow()
    tasks_of(workflow)[0]["exitActions"] = {"RESCHEDULE": "3", "COMPLETE": codes}
    findings = only(lint_dict(workflow, tmp_path, **POOL), "RS017")
    assert len(findings) == 1 and findings[0].severity == "warning"
    assert f"ends COMPLETED on exit {shown}" in findings[0].message
    assert findings[0].path == "workflow.groups[0].tasks[0].exitActions.COMPLETE"


def test_rs017_complete_on_0_or_a_dedicated_code_is_fine(tmp_path: Path) -> None:
    workflow = good_workflow()
    for task in tasks_of(workflow):
        task["exitActions"] = {"RESCHEDULE": "3", "COMPLETE": "0,42"}
    assert lint_dict(workflow, tmp_path, **POOL) == []
