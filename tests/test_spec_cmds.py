"""``resched validate`` and ``resched lint``: output forms, exit codes, one-line errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from lint_fixtures import dump_workflow, good_workflow

from workflows.cli import main

JOURNEY = """\
default-values:
  upload_location: s3://bucket/default
workflow:
  name: train
  groups:
  - name: training
    ignoreNonleadStatus: false
    tasks:
    - name: master
      lead: true
      command: ["bash", "-c", "resched wrap -- torchrun x"]
      inputs:
      - url: {{upload_location}}/models
      checkpoint:
      - path: /tmp/models
        url: {{upload_location}}
        frequency: 5m
      exitActions:
        RESCHEDULE: 3
    - name: worker_1
      command: ["bash", "-c", "resched wrap -- torchrun x"]
      exitActions:
        RESCHEDULE: 3
"""


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def journey(tmp_path: Path) -> Path:
    path = tmp_path / "train.yaml"
    path.write_text(JOURNEY)
    return path


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_lint_text_matches_the_design_journey(journey: Path) -> None:
    result = run("lint", str(journey), "--set", "upload_location=s3://team/run7")
    assert result.exit_code == 0, result.output  # a warning and an info: exit 0
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "warning RS001 workflow.groups[0].tasks[1]: checkpoint url s3://team/run7 is not an "
        "input of task worker_1 (task master writes it); after a reschedule it would start "
        f"from step 0 ({journey}:20)"
    )
    assert lines[1].startswith("        fix: add `- url: s3://team/run7/models` under the inputs of task worker_1")
    assert lines[2].startswith("info    RS004 workflow.groups[0].tasks[0].exitActions.RESCHEDULE: ")
    assert "max_retry_per_task > 0" in lines[2]
    assert lines[3].startswith("        fix: ") and "--pool-retry-limit N" in lines[3]
    assert result.stderr.strip() == f"{journey}: 1 warning, 1 info"


def test_lint_json_is_a_list_of_objects(journey: Path) -> None:
    result = run("lint", str(journey), "--format", "json", "--set", "upload_location=s3://team/run7")
    assert result.exit_code == 0
    findings = json.loads(result.stdout)
    assert [f["id"] for f in findings] == ["RS001", "RS004"]
    assert set(findings[0]) == {"id", "severity", "path", "line", "message", "fix"}
    assert findings[0]["line"] == 20 and findings[0]["severity"] == "warning"


def test_lint_json_with_no_findings_is_an_empty_list(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(dump_workflow(good_workflow()))
    result = run("lint", str(path), "--format", "json", "--pool-retry-limit", "1")
    assert (result.exit_code, json.loads(result.stdout)) == (0, [])


def test_strict_makes_warnings_fail(journey: Path) -> None:
    assert run("lint", str(journey), "--strict").exit_code == 1


def test_infos_alone_pass_even_with_strict(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(dump_workflow(good_workflow()))
    result = run("lint", str(path), "--strict")
    assert result.exit_code == 0
    assert result.stdout.startswith("info    RS004 ")


def test_errors_exit_1_and_target_decides(journey: Path) -> None:
    local = ("--set", "upload_location=file:///tmp/ck")
    result = run("lint", str(journey), *local)
    assert result.exit_code == 1
    assert "error   RS002 " in result.stdout
    assert run("lint", str(journey), *local, "--target", "local").exit_code == 0
    assert run("lint", str(journey), *local, "--target", "slurm").exit_code == 0


def test_pool_retry_limit_and_checkpoint_write_seconds(journey: Path) -> None:
    silent = run("lint", str(journey), "--pool-retry-limit", "2", "--format", "json")
    assert "RS004" not in [f["id"] for f in json.loads(silent.stdout)]
    zero = json.loads(run("lint", str(journey), "--pool-retry-limit", "0", "--format", "json").stdout)
    assert [f["severity"] for f in zero if f["id"] == "RS004"] == ["warning"]
    slow = json.loads(run("lint", str(journey), "--checkpoint-write-seconds", "600", "--format", "json").stdout)
    assert "RS012" in [f["id"] for f in slow]


def test_osmo_style_multi_item_set(journey: Path) -> None:
    result = run("lint", str(journey), "--set", "upload_location=s3://a/b", "unused=1", "--format", "json")
    assert result.exit_code == 0, result.output
    assert "s3://a/b" in json.loads(result.stdout)[0]["message"]


def test_validate_prints_valid_and_the_findings(journey: Path) -> None:
    result = run("validate", str(journey), "--set", "upload_location=s3://team/run7")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"valid: {journey}: workflow train, 1 group(s), 2 task(s); lint: 1 warning, 1 info")
    assert "warning RS001 workflow.groups[0].tasks[1]" in result.stderr


def test_validate_exits_1_on_a_lint_error(journey: Path) -> None:
    result = run("validate", str(journey), "--set", "upload_location=/tmp/ck")
    assert result.exit_code == 1
    assert "error   RS002 " in result.stderr
    assert run("validate", str(journey), "--set", "upload_location=/tmp/ck", "--target", "local").exit_code == 0


@pytest.mark.parametrize("command", ["validate", "lint"])
def test_a_spec_error_is_one_line_with_file_line_and_path(tmp_path: Path, command: str) -> None:
    path = _write(tmp_path, """\
        workflow:
          name: w
          tasks:
          - name: a
            command: [x]
            exitActons: {RESCHEDULE: 3}
        """)
    result = run(command, str(path))
    assert result.exit_code == 2
    assert result.stderr == (
        f"resched: error: {path}:6 workflow.tasks[0].exitActons: unknown key 'exitActons' "
        "(fix: did you mean 'exitActions'?)\n"
    )
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--set", "novalue"], "novalue"),
        (["--set", "x=1"], "undefined"),
    ],
)
def test_value_and_render_errors_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    path = _write(tmp_path, "workflow:\n  name: {{ missing }}\n  tasks: [{name: a, command: [x]}]\n")
    result = run("lint", str(path), *args)
    assert result.exit_code != 0 and result.exit_code != 70
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("resched: error: ")
    assert needle in result.stderr
    assert "Traceback" not in result.output


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    result = run("lint", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert result.stderr.startswith("resched: error: ") and len(result.stderr.splitlines()) == 1


def test_bad_options_are_usage_errors(journey: Path) -> None:
    assert run("lint", str(journey), "--format", "xml").exit_code == 2
    assert run("lint", str(journey), "--target", "k8s").exit_code == 2
    assert run("lint", str(journey), "--pool-retry-limit", "-1").exit_code == 2


def test_values_files_feed_lint(journey: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("upload_location: s3://from/file\n")
    result = run("lint", str(journey), "-f", str(values), "--format", "json")
    assert "s3://from/file/models" in json.loads(result.stdout)[0]["fix"]
    result = run("lint", str(journey), "-f", str(values), "--set", "upload_location=s3://x/y", "--format", "json")
    assert "s3://x/y/models" in json.loads(result.stdout)[0]["fix"]
