"""`resched init NAME DIR --script train.py --script-args ...`: start from the user's own
script (copied next to the spec, named with its flags in values.yaml), never losing a
user file, and the result renders the script's own flags under resched wrap."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from workflows.cli import main
from workflows.pipeline import load_workflow
from workflows.values import ValueOptions

ARGS = "--output-dir /tmp/models --max-steps 40"


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "my_train.py"
    path.write_text("print('my own training')\n")
    return path


@pytest.mark.parametrize("template", ["single-node-torchrun", "multi-node-torchrun"])
def test_init_from_my_script_renders_its_flags_under_wrap(tmp_path: Path, script: Path,
                                                          template: str) -> None:
    job = tmp_path / "job"
    result = CliRunner().invoke(main, ["init", template, str(job), "--script", str(script),
                                       "--script-args", ARGS])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in job.iterdir()) == ["my_train.py", "train.yaml", "values.yaml"]
    assert (job / "my_train.py").read_text() == script.read_text()
    assert f"-f {job / 'values.yaml'}" in result.stderr
    loaded = load_workflow(job / "train.yaml", ValueOptions(
        files=(job / "values.yaml",),
        sets=("upload_location=s3://team/run7", "image=reg.example/t/resched-pytorch:1")))
    tasks = loaded.spec.all_tasks()
    assert {t.environment["SCRIPT_ARGS"] for t in tasks} == {ARGS}
    (uploaded,) = {f.localpath for t in tasks for f in t.files if f.path == "/tmp/job/train.py"}
    assert uploaded == "my_train.py"
    assert [f.id for f in loaded.findings if f.severity != "info"] == []


def test_a_template_without_script_args_refuses_in_one_line(tmp_path: Path, script: Path) -> None:
    result = CliRunner().invoke(main, ["init", "multi-node-ft-launcher", str(tmp_path / "j"),
                                       "--script", str(script)])
    assert result.exit_code != 0 and "single-node-torchrun" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "j").exists()


def test_values_file_of_the_user_is_never_overwritten(tmp_path: Path, script: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "values.yaml").write_text("mine: 1\n")
    argv = ["init", "single-node-torchrun", str(job), "--script", str(script)]
    refused = CliRunner().invoke(main, argv)
    assert refused.exit_code != 0 and (job / "values.yaml").read_text() == "mine: 1\n"
    forced = CliRunner().invoke(main, [*argv, "--force"])
    assert forced.exit_code == 0, forced.output
    assert (job / "values.yaml.bak").read_text() == "mine: 1\n"
