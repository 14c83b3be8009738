"""``resched classify``: run the rule catalogue on saved artifacts.

This is what users unit-test their own rules with: a saved log, an exit code, maybe
error files and a tracker file in; the diagnosis (rule, category, decision, evidence
with line numbers, hint) out, as text or JSON. ``--history`` adds what the wrapper
would decide given earlier attempts (budgets, escalation, node memory), and
``--explain`` every rule that matched and why one won.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from wrapper import config
from wrapper.classifier import Diagnosis, classify_artifacts, format_diagnosis
from wrapper.errors import ReschedError
from wrapper.history import History, HistoryCorrupted, parse_history
from wrapper.policy import Budgets, PolicyDecision, decide
from wrapper.classifier.rules import load_rules, parse_signal


class ClassifyInputError(ReschedError):
    """A classify argument names something that does not exist or cannot be parsed."""


def _signal_option(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_signal(value)
    except ValueError as error:
        raise ClassifyInputError(str(error), where="--signal", fix="give a number (9) or a name (KILL, SIGTERM)") from None


def _exit_code(value: int | None, signal: str | None) -> None:
    if value is not None and signal is not None:
        raise ClassifyInputError(
            "--exit-code and --signal both given", where="--exit-code/--signal",
            fix="a process either exits with a code or is killed by a signal: give one")
    if value is not None and not 0 <= value <= 255:
        raise ClassifyInputError(
            f"exit code {value} is not in 0..255", where="--exit-code",
            fix="give the process's exit status (a launcher's -N means --signal N)")


def _history(path: Path | None) -> History | None:
    if path is None:
        return None
    if not path.is_file():
        raise ClassifyInputError(f"no such file: {path}", where="--history")
    try:
        return parse_history(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, HistoryCorrupted, UnicodeDecodeError) as error:
        raise ClassifyInputError(
            f"not a resched history: {error}", where=str(path),
            fix="give a history.json from a state dir (<checkpoint-dir>/.resched/history.json)") from None


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
@click.option("--no-log", is_flag=True, help="Classify on the exit status / flags alone (no log saved).")
@click.option("--history", "history_file", type=click.Path(path_type=Path), default=None,
              help="A history.json: also decide as `resched wrap` would after those attempts.")
@click.option("--node", default="node", show_default=True, help="This attempt's node (with --history).")
@click.option("--allocation", default=None,
              help="This attempt's allocation (with --history; default: the last recorded one).")
@click.option("--step", type=int, default=None, help="Checkpoint step this attempt ended at (with --history).")
@click.option("--max-retries", type=int, default=config.DEFAULT_MAX_RETRIES, show_default=True)
@click.option("--max-reschedules", type=int, default=config.DEFAULT_MAX_RESCHEDULES, show_default=True)
@click.option("--explain", is_flag=True, help="Show every rule that matched and why one won.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def classify_command(
    exit_code: int | None, signal_: str | None, logs: tuple[Path, ...], error_files: tuple[Path, ...],
    tracker: Path | None, rule_files: tuple[Path, ...], hung: bool, stop_signal: str | None,
    expect_finished: str | None, launcher: str | None, no_log: bool, history_file: Path | None,
    node: str, allocation: str | None, step: int | None, max_retries: int, max_reschedules: int,
    explain: bool, fmt: str,
) -> None:
    """Diagnose a failed run from its saved log, exit code and error files."""
    if not logs and not error_files and not no_log:
        raise click.UsageError(
            "no log given: pass --log FILE (repeatable), or --no-log to classify on the "
            "exit status alone")
    _exit_code(exit_code, signal_)
    if max_retries < 0 or max_reschedules < 0:
        raise ClassifyInputError("budgets cannot be negative", where="--max-retries/--max-reschedules",
                                 fix="give 0 or more")
    history = _history(history_file)
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
    verdict = None
    if history is not None:
        verdict = _decide(diagnosis, history, node=node, allocation=allocation, step=step,
                          budgets=Budgets(max_retries=max_retries, max_reschedules=max_reschedules))
    if fmt == "json":
        data = diagnosis.to_json()
        if verdict is not None:
            data["policy"] = _verdict_json(verdict)
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(format_diagnosis(diagnosis, explain=explain))
    if verdict is not None:
        click.echo(f"with history: {verdict.action} ({verdict.reason})")


def _decide(diagnosis: Diagnosis, history: History, *, node: str, allocation: str | None,
            step: int | None, budgets: Budgets) -> PolicyDecision:
    """What the wrapper decides after this attempt, given the earlier ones. The
    attempt is taken to run in the last recorded allocation (an in-place retry), so the
    retries recorded there count against --max-retries."""
    past = history.past
    if allocation is None:
        allocation = next((a.allocation for a in reversed(past) if a.allocation), "allocation")
    return decide(diagnosis, history, budgets, node=node, allocation=allocation, step=step,
                  retries_used_in_allocation=0)


def _verdict_json(verdict: PolicyDecision) -> dict[str, Any]:
    return {"decision": str(verdict.action), "reason": verdict.reason, "backoff_s": verdict.backoff_s,
            "exclude_node": verdict.exclude_node, "retries_left": verdict.retries_left,
            "reschedules_left": verdict.reschedules_left}


COMMANDS: list[click.Command] = [classify_command]
