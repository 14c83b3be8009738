"""docs/your-training.md stays true: every example it names exists and is run by a test
(the test runs the example file itself), and its "try it" commands work as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from workflows.cli import main

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "your-training.md"


def _examples() -> set[str]:
    return set(re.findall(r"examples/frameworks/[a-z_]+\.py", DOC.read_text()))


def test_every_example_named_exists_and_a_test_runs_it() -> None:
    examples = _examples()
    assert {"examples/frameworks/hf_trainer.py", "examples/frameworks/lightning_train.py",
            "examples/frameworks/dcp_train.py", "examples/frameworks/plain_loop.py",
            "examples/frameworks/megatron_train.py",
            "examples/frameworks/deepspeed_train.py"} <= examples
    tests = {p: p.read_text() for p in (REPO / "tests").glob("test_*.py") if p.name != Path(__file__).name}
    for example in examples:
        assert (REPO / example).is_file(), example
        name = Path(example).name
        runners = [p.name for p, text in tests.items() if f'"{name}"' in text]
        assert runners, f"no test runs {example}"


def _block_commands(first_word: str) -> list[list[str]]:
    text = DOC.read_text().replace("\\\n", " ")
    return [shlex.split(line) for line in text.splitlines() if line.startswith(first_word + " ")]


def test_the_try_it_init_and_the_lint_commands_run_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(REPO / "examples")
    inits = [c for c in _block_commands("resched") if c[1] == "init"]
    assert inits
    for command in inits:
        result = CliRunner().invoke(main, command[1:])
        assert result.exit_code == 0, result.output
    lints = [c for c in _block_commands("resched") if c[1] == "lint"]
    assert lints
    for command in lints:
        result = CliRunner().invoke(main, command[1:])
        assert result.exit_code == 0, result.output
        assert "RS019" not in result.output  # the image built from docker/Dockerfile says it
