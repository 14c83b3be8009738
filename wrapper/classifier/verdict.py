"""The one judge: how an attempt ended -> a diagnosis, for `resched wrap` and `resched
classify` alike.

Both commands collect the same evidence: the exit status, the output read by an
:class:`~wrapper.classifier.output_watch.OutputWatch` (rule hits, NVRx reports, progress, launcher
restarts), torchelastic error files, the launcher's failure summary, the Megatron tracker
file, the finished flag. ``wrap`` reads the output while it streams, ``classify`` from
saved logs; from there on both call :func:`judge`, so the same evidence gives the same
decision (tests/test_one_judge.py runs every corpus log through both).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wrapper.classifier.classify import Diagnosis, Evidence, _scan_log, classify
from wrapper.classifier.launcher_logs import SummaryBlock
from wrapper.classifier.nvrx_verdict import apply_nvrx
from wrapper.classifier.nvrx_watch import NvrxWatch
from wrapper.classifier.output_watch import OutputWatch
from wrapper.classifier.rules import RuleSet
from wrapper.classifier.scanner import LineScanner

__all__ = ["classify_artifacts", "judge", "judge_mapping"]


def judge(evidence: Evidence, rules: RuleSet, *, nvrx: NvrxWatch | None = None,
          straggler_file: Path | None = None,
          tails: Sequence[SummaryBlock] | None = None) -> Diagnosis:
    """The decision on one attempt; ``diagnosis.nvrx`` holds what NVRx reported."""
    nvrx = nvrx or NvrxWatch()
    unhealthy = evidence.exit_code == 0 and evidence.signal is None and nvrx.launcher_unhealthy
    if unhealthy:
        # ft_launcher exited 0 although its result was UNHEALTHY (a rank was killed):
        # the failure it is, never a completed training.
        evidence = dataclasses.replace(evidence, exit_code=1)
    diagnosis = classify(evidence, rules, tails)
    facts = {"exit_code": evidence.exit_code, "signal": evidence.signal,
             "stop_signal": evidence.stop_signal, "expect_finished": evidence.expect_finished,
             "finished": evidence.finished}
    stragglers = nvrx.straggler_report(straggler_file) if straggler_file else nvrx.straggler_report(None)
    diagnosis, findings = apply_nvrx(diagnosis, nvrx, facts, stragglers)
    if unhealthy and diagnosis.decision != "complete":
        diagnosis = dataclasses.replace(diagnosis, hint=(
            "The launcher exited 0 but reported its workers UNHEALTHY: a failure. "
            + diagnosis.hint))
    return dataclasses.replace(diagnosis, nvrx=findings)


_EVIDENCE_FIELDS = {f.name for f in dataclasses.fields(Evidence)}


def judge_mapping(evidence: Mapping[str, Any], rules: RuleSet) -> Diagnosis:
    """:func:`judge` on the evidence mapping the attempt loop collects."""
    return judge(Evidence(**{k: v for k, v in evidence.items() if k in _EVIDENCE_FIELDS}),
                 rules, nvrx=evidence.get("nvrx"), straggler_file=evidence.get("straggler_file"))


def classify_artifacts(
    *,
    logs: Sequence[Path],
    error_files: Sequence[Path],
    exit_code: int | None,
    signal: int | None,
    rules: RuleSet,
    tracker_file: Path | None = None,
    hung: bool = False,
    stop_signal: str | None = None,
    expect_finished: bool = False,
    finished: bool = False,
    launcher: str | None = None,
    straggler_file: Path | None = None,
) -> Diagnosis:
    """Diagnose saved artifacts (what ``resched classify`` runs): the logs are read by
    the same :class:`OutputWatch` that ``resched wrap`` feeds while the training runs."""
    watch = OutputWatch(LineScanner(rules))
    tails = [_scan_log(Path(path), watch) for path in logs]
    evidence = Evidence(
        exit_code=exit_code, signal=signal, hits=tuple(watch.scanner.hits),
        error_files=tuple(error_files), tracker_file=tracker_file, hung=hung,
        stop_signal=stop_signal, expect_finished=expect_finished, finished=finished,
        launcher=launcher, last_step=watch.steps.iteration,
        total_steps=watch.steps.total_steps,
    )
    return judge(evidence, rules, nvrx=watch.nvrx, straggler_file=straggler_file, tails=tails)
