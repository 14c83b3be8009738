"""`submit --backend osmo --dry-run` writes the spec to a file and prints a short summary
with the exact submit command (the spec of a template is tens of KB: never on the
terminal unless --show-spec)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from workflows.cli import main

TEMPLATE = "multi-node-torchrun"


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["init", TEMPLATE, "job"])
    assert result.exit_code == 0, result.output
    return tmp_path / "job" / "train.yaml"


def _submit(spec: Path, *args: str) -> str:
    result = CliRunner().invoke(main, ["submit", "--backend", "osmo", str(spec), "--set",
                                       "upload_location=s3://team/run7", "--pool", "a100",
                                       "--dry-run", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_dry_run_writes_the_spec_and_names_the_exact_command(job: Path) -> None:
    out = _submit(job)
    assert len(out.strip().splitlines()) <= 3 and "workflow:" not in out
    command = next(line.split(":", 1)[1] for line in out.splitlines()
                   if line.startswith("submit it with:"))
    argv = shlex.split(command)
    assert argv[:3] == ["osmo", "workflow", "submit"] and argv[4:] == ["--pool", "a100"]
    written = Path(argv[3])
    assert written.is_file() and written.parts[:2] == (".resched", "dry-run")
    full = _submit(job, "--show-spec")
    assert full.split("# workflow.yaml:\n", 1)[1] == written.read_text() + "\n"
    again = shlex.split(next(line.split(":", 1)[1] for line in _submit(job).splitlines()
                             if line.startswith("submit it with:")))
    assert again[3] != argv[3] and written.exists()  # a new folder; the first is kept


def test_dry_run_with_output_writes_there(job: Path, tmp_path: Path) -> None:
    out = _submit(job, "--output", str(tmp_path / "o"))
    assert f"osmo workflow submit {tmp_path / 'o' / 'workflow.yaml'} --pool a100" in out
    assert (tmp_path / "o" / "workflow.yaml").is_file()
    assert not os.path.exists(".resched")
