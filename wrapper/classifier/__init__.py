"""The classifier: how a training attempt ended -> a diagnosis, for `resched wrap` and
`resched classify` alike.

One public entry point, :func:`judge` (``verdict.py``): the evidence of one attempt
(exit status, the output read by an :class:`OutputWatch`, error files, the launcher's
summary, the Megatron tracker file, the finished flag) and the rules -> the diagnosis,
with what NVRx reported. ``resched wrap`` feeds an :class:`OutputWatch` while the
training runs (``wrapper.judge.RuleJudge``); ``resched classify`` reads saved logs with
:func:`classify_artifacts`, which feeds the same reader and calls the same judge.

Inside, one module per part: ``catalogue.yaml`` and ``rules.py`` (the rules as data),
``prefilter.py`` and ``scanner.py`` (finding rule lines as they stream), ``launcher_logs.py``
(what torchrun / ft_launcher hide: per-rank codes, error files, the tracker file),
``nvrx_watch.py`` and ``nvrx_verdict.py`` (NVRx in-process restarts, stragglers),
``success.py`` (evidence that the training finished), ``costs.py`` (what each wrong
decision costs), ``diagnosis.py`` (the evidence and diagnosis types, the printed text),
``precedence.py`` (which matching rule wins, and why), ``classify.py`` (the rule engine:
the winner against success evidence and the cost table), ``unknown.py`` (what an unknown
failure shows) and ``verdict.py`` (the judge).
"""

from __future__ import annotations

from wrapper.classifier.classify import Diagnosis, Evidence, EvidenceLine, format_diagnosis
from wrapper.classifier.output_watch import OutputWatch
from wrapper.classifier.rules import RulesError, RuleSet, load_rules
from wrapper.classifier.scanner import LineScanner
from wrapper.classifier.verdict import classify_artifacts, judge, judge_mapping

__all__ = [
    "Diagnosis", "Evidence", "EvidenceLine", "LineScanner", "OutputWatch", "RuleSet",
    "RulesError", "classify_artifacts", "format_diagnosis", "judge", "judge_mapping",
    "load_rules",
]
