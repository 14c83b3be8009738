"""``resched templates`` and ``resched init``: listing, copying, never losing a user file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from workflows.cli import main
from workflows.errors import UsageError
from workflows.templates_catalog import TEMPLATES_DIR, find_template, init_template, list_templates

SHIPPED = ("single-node-torchrun", "multi-node-torchrun", "multi-node-ft-launcher")


def test_list_templates_reads_the_leading_comment() -> None:
    templates = {t.name: t for t in list_templates()}
    assert set(SHIPPED) <= set(templates)
    for name in SHIPPED:
        first = templates[name].path.read_text().splitlines()[0]
        assert templates[name].description == first.lstrip("# ").strip()
        assert templates[name].description != "(no description)"


def test_description_of_a_template_without_comment(tmp_path: Path) -> None:
    (tmp_path / "bare.yaml").write_text("workflow:\n  name: w\n")
    (tmp_path / "_partial.yaml").write_text("# a partial\n")
    assert [(t.name, t.description) for t in list_templates(tmp_path)] == [("bare", "(no description)")]


def test_templates_command_lists_names_and_descriptions() -> None:
    result = CliRunner().invoke(main, ["templates"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    for name in SHIPPED:
        line = next(line for line in lines if line.startswith(name + " "))
        assert find_template(name).description in line


def test_init_into_a_fresh_dir_copies_the_spec_and_its_files(tmp_path: Path) -> None:
    job = tmp_path / "job"
    result = CliRunner().invoke(main, ["init", "multi-node-torchrun", str(job)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in job.iterdir()) == ["train.py", "train.yaml"]
    assert (job / "train.yaml").read_text() == (TEMPLATES_DIR / "multi-node-torchrun.yaml").read_text()
    # templates/train.py is a symlink into examples/: the copy is the file itself
    assert not (job / "train.py").is_symlink()
    assert (job / "train.py").read_bytes() == (TEMPLATES_DIR / "train.py").resolve().read_bytes()
    assert f"wrote {job / 'train.yaml'}" in result.stdout


def test_the_initialised_job_lints_clean_with_a_user_bucket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    init_template("multi-node-torchrun", tmp_path / "job")
    monkeypatch.chdir(tmp_path)  # localpath resolves from the spec's folder, not the cwd
    result = CliRunner().invoke(
        main, ["lint", "job/train.yaml", "--set", "upload_location=s3://team/run7", "--pool-retry-limit", "2",
               "--set", "image=registry.example/team/resched-pytorch:25.01-py3"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "no findings" in result.stderr


def test_init_refuses_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "train.yaml").write_text("my own spec\n")
    result = CliRunner().invoke(main, ["init", "single-node-torchrun", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("resched: error: refusing to overwrite ")
    assert str(tmp_path / "train.yaml") in result.stderr
    assert "--force" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert (tmp_path / "train.yaml").read_text() == "my own spec\n"
    assert not (tmp_path / "train.py").exists()  # nothing half-copied


def test_init_force_keeps_backups(tmp_path: Path) -> None:
    (tmp_path / "train.yaml").write_text("v1\n")
    (tmp_path / "train.yaml.bak").write_text("v0\n")
    (tmp_path / "train.py").write_text("mine\n")
    result = init_template("single-node-torchrun", tmp_path, force=True)
    assert (tmp_path / "train.yaml.bak").read_text() == "v0\n"  # an older backup is kept too
    assert (tmp_path / "train.yaml.bak1").read_text() == "v1\n"
    assert (tmp_path / "train.py.bak").read_text() == "mine\n"
    assert set(result.backups) == {tmp_path / "train.yaml.bak1", tmp_path / "train.py.bak"}
    assert (tmp_path / "train.yaml").read_text().startswith("# Single-node")


def test_init_unknown_template_lists_the_names(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        init_template("multinode", tmp_path)
    assert all(name in str(info.value) for name in SHIPPED)


def test_init_accepts_the_yaml_suffix(tmp_path: Path) -> None:
    init_template("single-node-torchrun.yaml", tmp_path / "j")
    assert (tmp_path / "j" / "train.yaml").exists()


def test_init_into_a_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "afile"
    target.write_text("x")
    with pytest.raises(UsageError, match="is not a directory"):
        init_template("single-node-torchrun", target)
    assert target.read_text() == "x"


def test_init_again_over_identical_files_needs_no_force(tmp_path: Path) -> None:
    init_template("single-node-torchrun", tmp_path)
    result = init_template("single-node-torchrun", tmp_path)
    assert result.backups == ()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py", "train.yaml"]
