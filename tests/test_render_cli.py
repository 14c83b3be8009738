"""``resched render``: stdout is the server's text plus the one newline `osmo --dry-run` prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workflows.cli import main

FIXTURES = Path(__file__).parent / "render_fixtures"
RESCHED = Path(sys.executable).with_name("resched")


def run(*args: str) -> tuple[int, bytes, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout_bytes, result.stderr


@pytest.fixture
def workflow(tmp_path: Path) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text("workflow:\n  a: {{ a }}\n  b: {{ b }}\n  c: '{{input:0}}'\n\n"
                    "default-values:\n  a: 1\n  b: 2\n")
    return path


def test_render_prints_the_text_and_one_newline(workflow: Path) -> None:
    code, out, _ = run("render", str(workflow))
    assert code == 0
    assert out == b"workflow:\n  a: 1\n  b: 2\n  c: '{{input:0}}'\n\n"


def test_raw_prints_the_server_text_exactly(workflow: Path) -> None:
    code, out, _ = run("render", "--raw", str(workflow))
    assert code == 0 and out == b"workflow:\n  a: 1\n  b: 2\n  c: '{{input:0}}'\n"


def test_golden_through_the_cli() -> None:
    code, out, _ = run("render", str(FIXTURES / "tutorial.yaml"))
    assert code == 0 and out == (FIXTURES / "tutorial.golden").read_bytes() + b"\n"


def test_osmo_multi_item_set_form(workflow: Path) -> None:
    code, out, _ = run("render", str(workflow), "--set", "a=x", "b=08", "--set-string", "a=007")
    assert code == 0 and out.startswith(b"workflow:\n  a: 007\n  b: 8\n")
    code, out, _ = run("render", "--set", "a=y", "--set", "b=z", str(workflow))
    assert code == 0 and out.startswith(b"workflow:\n  a: y\n  b: z\n")


def test_values_files_and_set(tmp_path: Path, workflow: Path) -> None:
    first, second = tmp_path / "1.yaml", tmp_path / "2.yaml"
    first.write_text("a: one\nb: one\n")
    second.write_text("b: two\n")
    code, out, _ = run("render", str(workflow), "-f", str(first), "--values", str(second),
                       "--set", "a=set")
    assert code == 0 and out.startswith(b"workflow:\n  a: set\n  b: two\n")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "novalue"], "resched: error: --set novalue: expected KEY=VALUE"),
        (["--set-string", "x"], "resched: error: --set-string x: expected KEY=VALUE"),
        (["--set", "a=1", "--set", "broken"], "resched: error: --set broken: expected KEY=VALUE"),
    ],
)
def test_usage_errors_are_one_line(workflow: Path, args: list[str], expected: str) -> None:
    code, out, err = run("render", str(workflow), *args)
    assert code == 2 and out == b""
    assert err.strip() == err.strip().splitlines()[0] and err.startswith(expected)


def test_render_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("workflow:\n  name: x\n  id: {{ workflow_id }}\n")
    code, out, err = run("render", str(path))
    assert code == 2 and out == b""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"resched: error: {path}:3: undefined value: 'workflow_id' is undefined")


def test_dotted_key_warning_goes_to_stderr(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("workflow: {{ a.b }}\ndefault-values:\n  a: {b: 1}\n")
    result = CliRunner().invoke(main, ["render", str(path), "--set", "a.b=2"])
    assert result.exit_code == 0 and result.stdout == "workflow: 1\n"
    assert result.stderr.startswith("resched: warning: --set a.b=2: OSMO keys are flat")


def test_non_utf8_set_values_come_back_as_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("workflow: {{ v }}\n")
    proc = subprocess.run([str(RESCHED), "render", str(path), b"--set", b"v=\xff\xfe"],
                          capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"workflow: \xff\xfe\n"


def test_real_subprocess_render_and_debug(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("default-values:\n  n: 2\nworkflow:\n"
                    "{% for i in range(n) %}  - t{{ i }}: {{host:t0}}\n{% endfor %}")
    env = {**os.environ, "RESCHED_DEBUG": ""}
    proc = subprocess.run([str(RESCHED), "render", str(path), "--set", "n=3"],
                          capture_output=True, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"workflow:\n  - t0: {{host:t0}}\n  - t1: {{host:t0}}\n" \
                          b"  - t2: {{host:t0}}\n\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text("workflow:\n  x: {% for i in range(100000) %}{% for j in range(100000) %}"
                   "{% endfor %}{% endfor %}\n")
    proc = subprocess.run([str(RESCHED), "render", str(bad)], capture_output=True, text=True,
                          check=False, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"resched: error: {bad}:2: rendering stopped at the CPU-time limit "
                           "of 0.5 s (OSMO's limit): a loop that never ends?\n")
    proc = subprocess.run([str(RESCHED), "--debug", "render", str(bad)], capture_output=True,
                          text=True, check=False, env=env)
    assert proc.returncode != 0 and "Traceback" in proc.stderr
