"""Shared checks for the hostile-input suites: one clear line, a non-zero exit."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from workflows.cli import main
from wrapper.inputfile import MAX_INPUT_BYTES

SPEC = "workflow:\n  name: ok\n  tasks:\n  - name: t\n    image: ubuntu\n    command: [sh, -c, 'echo hi']\n"
BOMB = "workflow:\n  name: b\n  a0: &a0 [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"  a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9))


def make_inputs(tmp_path: Path) -> dict[str, str]:
    """Input files of every kind, by placeholder name (``{fifo}``, ``{bomb}``, ...)."""
    made = {
        "ok": SPEC, "empty": "", "list": "- a\n- b\n", "dupvals": "a: 1\na: 2\n",
        "dupspec": SPEC + "    command: [evil]\n", "bomb": BOMB,
        "deep": "workflow: " + "[" * 50_000 + "]" * 50_000 + "\n",
        "duprules": "rules:\n- id: x\n  id: y\n",
        "file": "just a file\n", "noworkflow": "version: 2\n",
    }
    paths = {}
    for name, text in made.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        paths[name] = str(path)
    (tmp_path / "bin.yaml").write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\x00")
    with (tmp_path / "big.yaml").open("wb") as handle:
        handle.truncate(MAX_INPUT_BYTES + 1)  # sparse: no disk used
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "dir").mkdir()
    return {**paths, "bin": str(tmp_path / "bin.yaml"), "big": str(tmp_path / "big.yaml"),
            "fifo": str(tmp_path / "fifo.yaml"), "dir": str(tmp_path / "dir"),
            "missing": str(tmp_path / "missing.yaml"), "zero": "/dev/zero", "tmp": str(tmp_path)}


def fill(args: list[str], files: dict[str, str]) -> list[str]:
    """Replace ``{name}`` placeholders with the paths of :func:`make_inputs`."""
    return [arg.format(**files) if "{" in arg else arg for arg in args]


def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``resched ARGS`` in-process; (exit code, stdout and stderr together)."""
    result = CliRunner().invoke(main, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"resched {args} raised {result.exception!r}\n{result.output}")
    return result.exit_code, result.output


def error_lines(output: str) -> list[str]:
    """The lines that say what went wrong (ours, or click's ``Error:`` line)."""
    return [line for line in output.splitlines()
            if line.startswith(("resched: error:", "Error:", "resched: internal error"))]


def assert_clear_error(code: int, output: str, *needles: str) -> None:
    """Refused: a non-zero usage exit, no traceback, exactly one error line naming ``needles``."""
    assert code not in (0, 70), output
    assert "Traceback" not in output and "internal error" not in output, output
    lines = error_lines(output)
    assert len(lines) == 1, output
    for needle in needles:
        assert needle in lines[0], output
