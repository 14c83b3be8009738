"""``resched classify``: run the rule catalogue on saved artifacts.

This is what users unit-test their own rules with: a saved log, an exit code, maybe
error files and a tracker file in; the diagnosis (rule, category, decision, evidence
with line numbers, hint) out, as text or JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from wrapper.classify import classify_artifacts, format_diagnosis
from wrapper.errors import ReschedError
from wrapper.rules import load_rules, parse_signal


class ClassifyInputError(ReschedError):
    """A classify argument names something that does not exist or cannot be parsed."""


def _signal_option(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_signal(value)
    except ValueError as error:
        raise ClassifyInputError(str(error), where="--signal", fix="give a number (9) or a name (KILL, SIGTERM)") from None


def _existing(paths: tuple[Path, ...], option: str) -> list[Path]:
    for path in paths:
        if not path.is_file():
            raise ClassifyInputError(f"no such file: {path}", where=option)
    return list(paths)


@click.command("classify")
@click.option("--exit-code", type=int, default=None, help="Exit code of the entrypoint (omit if killed by a signal).")
@click.option("--signal", "signal_", default=None, metavar="S", help="Signal that ended it: a number or a name (9, KILL, SIGKILL).")
@click.option("--log", "logs", multiple=True, type=click.Path(path_type=Path), help="A saved log (repeatable).")
@click.option("--error-file", "error_files", multiple=True, type=click.Path(path_type=Path),
              help="A torchelastic error file (repeatable).")
@click.option("--tracker", "tracker", type=click.Path(path_type=Path), default=None,
              help="The Megatron --result-rejected-tracker-filename file.")
@click.option("--rules", "rule_files", multiple=True, type=click.Path(path_type=Path),
              help="A rules YAML file; its rules take precedence over the catalogue (repeatable).")
@click.option("--hung", is_flag=True, help="resched's hang detector killed it.")
@click.option("--stop-requested", "stop_signal", default=None, metavar="SIGNAL",
              help="resched itself was asked to stop (preemption), e.g. SIGTERM.")
@click.option("--expect-finished", type=click.Choice(["finished", "unfinished"]), default=None,
              help="Whether the finished-flag file existed (as with --expect-finished-flag).")
@click.option("--launcher", type=click.Choice(["torchrun", "ft_launcher"]), default=None)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def classify_command(
    exit_code: int | None, signal_: str | None, logs: tuple[Path, ...], error_files: tuple[Path, ...],
    tracker: Path | None, rule_files: tuple[Path, ...], hung: bool, stop_signal: str | None,
    expect_finished: str | None, launcher: str | None, fmt: str,
) -> None:
    """Diagnose a failed run from its saved log, exit code and error files."""
    if tracker is not None and not tracker.is_file():
        raise ClassifyInputError(f"no such file: {tracker}", where="--tracker")
    diagnosis = classify_artifacts(
        logs=_existing(logs, "--log"),
        error_files=_existing(error_files, "--error-file"),
        exit_code=exit_code,
        signal=_signal_option(signal_),
        rules=load_rules(_existing(rule_files, "--rules")),
        tracker_file=tracker,
        hung=hung,
        stop_signal=stop_signal,
        expect_finished=expect_finished is not None,
        finished=expect_finished == "finished",
        launcher=launcher,
    )
    if fmt == "json":
        click.echo(json.dumps(diagnosis.to_json(), indent=2))
    else:
        click.echo(format_diagnosis(diagnosis))


COMMANDS: list[click.Command] = [classify_command]
