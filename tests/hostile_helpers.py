"""Shared checks for the hostile-input suites: one clear line, a non-zero exit."""

from __future__ import annotations

from click.testing import CliRunner

from workflows.cli import main


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
