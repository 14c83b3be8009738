"""The CLI's shared plumbing: one-line errors, --debug, multi-item --set, backend options."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from workflows.backends import get_backend
from workflows.cli import INTERNAL_ERROR_EXIT, main
from workflows.cli.common import expand_multi_item_options
from workflows.backends.options import parse_options
from workflows.errors import UsageError
from wrapper.durations import DurationError, parse_duration
from wrapper.errors import ReschedError


@click.command("boom-user")
def _boom_user() -> None:
    raise UsageError("the thing is wrong", where="x.yaml:3 workflow.name", fix="rename it")


@click.command("boom-bug")
def _boom_bug() -> None:
    raise RuntimeError("unexpected")


main.add_command(_boom_user)
main.add_command(_boom_bug)


def test_user_error_is_one_line_without_traceback() -> None:
    result = CliRunner().invoke(main, ["boom-user"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "resched: error: x.yaml:3 workflow.name: the thing is wrong (fix: rename it)"
    )
    assert "Traceback" not in result.output


def test_debug_shows_the_exception() -> None:
    result = CliRunner().invoke(main, ["--debug", "boom-user"])
    assert isinstance(result.exception, UsageError)


def test_a_bug_never_exits_zero_and_says_so() -> None:
    result = CliRunner().invoke(main, ["boom-bug"])
    assert result.exit_code == INTERNAL_ERROR_EXIT
    assert "internal error: RuntimeError: unexpected" in result.stderr
    assert "--debug" in result.stderr


def test_error_message_is_folded_to_one_line() -> None:
    assert "\n" not in str(ReschedError("a\nb", where="f", fix="c"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "a=1", "b=2", "f.yaml"], ["--set", "a=1", "--set", "b=2", "f.yaml"]),
        (["--set", "a=1", "--set", "b=2"], ["--set", "a=1", "--set", "b=2"]),
        (["--set", "novalue", "f.yaml"], ["--set", "novalue", "f.yaml"]),
        (["--set-string", "a=x=y", "b=", "-f", "v.yaml"], ["--set-string", "a=x=y", "--set-string", "b=", "-f", "v.yaml"]),
        (["--set", "a=1", "--", "b=2"], ["--set", "a=1", "--", "b=2"]),
    ],
)
def test_osmo_style_multi_item_set(args: list[str], expected: list[str]) -> None:
    assert expand_multi_item_options(args) == expected


def test_backend_refuses_an_option_it_does_not_take() -> None:
    osmo = get_backend("osmo").options
    with pytest.raises(UsageError, match="--partition is not an option of the osmo backend") as caught:
        parse_options(osmo, {"partition": "gpu", "pool": None}, "osmo")
    assert "takes --pool, --priority" in str(caught.value)
    assert parse_options(osmo, {"pool": "a100", "chaos": None}, "osmo") == {"pool": "a100", "priority": None}


def test_unknown_backend_lists_the_valid_ones() -> None:
    with pytest.raises(UsageError, match="local, osmo, slurm"):
        get_backend("kubernetes")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(300, 300.0), ("30s", 30.0), ("5m", 300.0), ("2h", 7200.0), ("1d", 86400.0), ("500ms", 0.5),
     ("PT5M", 300.0), ("PT1H30M", 5400.0), ("P1D", 86400.0), ("90", 90.0), (1.5, 1.5)],
)
def test_osmo_durations(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["1h30m", "5 minutes", "", "PT", "-5s", True, None, float("nan"), -1])
def test_bad_durations_name_the_forms(value: object) -> None:
    with pytest.raises(DurationError, match="ISO-8601"):
        parse_duration(value)


def test_console_script_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "resched" in out.stdout
