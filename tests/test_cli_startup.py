"""`resched --help` starts light (issue 14, item 3): it lists every command from static
summaries instead of importing every area. Guarded by what gets imported, not by time."""

from __future__ import annotations

import json
import os
import subprocess

import click

from tests.supervise_fixtures import PYTHON, REPO

HEAVY = ("pydantic", "jinja2", "fsspec", "torch", "yaml", "numpy")

PROBE = """
import json, sys
from workflows.cli import main
try:
    main([%s], prog_name="resched")
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(*argv: str) -> set[str]:
    args = ", ".join(repr(arg) for arg in argv)
    result = subprocess.run([PYTHON, "-c", PROBE % args], capture_output=True, text=True,
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            timeout=120, check=True)
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_help_imports_no_heavy_library() -> None:
    loaded = _modules_after("--help")
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert not heavy, f"`resched --help` imported {heavy}"
    assert "workflows.cli.spec_cmds" not in loaded  # no command area was loaded


def test_wrap_help_does_not_load_the_control_side() -> None:
    loaded = _modules_after("wrap", "--help")
    assert "workflows.cli.wrap_cmds" in loaded  # the probe really reached the command
    assert not [m for m in loaded if m.split(".")[0] in ("pydantic", "jinja2", "fsspec")]


def test_static_summaries_match_each_commands_own_help() -> None:
    from workflows.cli import _COMMAND_MODULES, COMMAND_SUMMARIES, _short_help, main

    ctx = click.Context(main)
    # a new command without a summary still shows (imported), but --help gets slower
    assert set(COMMAND_SUMMARIES) == set(_COMMAND_MODULES), "add its line to COMMAND_SUMMARIES"
    for name, summary in COMMAND_SUMMARIES.items():
        command = main.get_command(ctx, name)
        assert command is not None
        for limit in (40, 60, 10**6):
            assert _short_help(name, summary, limit) == command.get_short_help_str(limit), name


def test_unchanged_republish_skips_slow_lookups(tmp_path) -> None:
    """`checkpoint publish` of an unchanged directory (the common periodic call) loads no
    heavy library and no distribution metadata scan (~30 ms); the version is a constant."""
    source = tmp_path / "ckpt"
    source.mkdir()
    (source / "model.pt").write_bytes(b"weights" * 1000)
    store = f"file://{tmp_path / 'store'}"
    env = dict(os.environ, PYTHONPATH=str(REPO), RESCHED_CACHE_DIR=str(tmp_path / "cache"))
    subprocess.run([PYTHON, "-m", "workflows.cli", "checkpoint", "publish", str(source), store],
                   cwd=REPO, env=env, timeout=120, check=True, capture_output=True)
    args = ", ".join(repr(a) for a in ("checkpoint", "publish", str(source), store))
    result = subprocess.run([PYTHON, "-c", PROBE % args], capture_output=True, text=True,
                            cwd=REPO, env=env, timeout=120, check=True)
    assert "nothing published" in result.stdout + result.stderr  # really the unchanged path
    loaded = set(json.loads(result.stdout.splitlines()[-1]))
    assert "wrapper.checkpoint.publish" in loaded
    slow = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m == "importlib.metadata")
    assert not slow, f"an unchanged re-publish imported {slow}"
