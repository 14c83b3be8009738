"""An unknown failure says what it saw: the last error-looking lines of the logs and the
rule families whose words they share most (a start for the user's own rule)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from wrapper.classifier.diagnosis import Diagnosis, EvidenceLine
from wrapper.classifier.launcher_logs import SummaryBlock, strip_ansi
from wrapper.classifier.precedence import catch_all
from wrapper.classifier.rules import RuleSet

_ERRORISH = re.compile(
    r"error|fail|fatal|exception|abort|killed|terminat|denied|refused|timed? ?out|"
    r"cannot|could not|unable|segmentation|core dumped|\bnan\b|\binf\b|xid", re.IGNORECASE)
_UNKNOWN_EVIDENCE_LINES = 5
_WORD = re.compile(r"[a-z][a-z0-9]{3,}")
_STOP_WORDS = frozenset(
    ["this", "that", "with", "from", "have", "were", "will", "when", "then", "than", "into", "only", "same", "your", "rule", "rules", "retried", "retry", "reschedule", "rescheduled", "abort", "aborted", "again", "node", "error", "errors", "failed", "failure", "the", "and", "for", "not"])


def _error_lines(tails: Sequence[SummaryBlock]) -> list[EvidenceLine]:
    """The last lines of the logs that look like an error (for a failure no rule knows)."""
    found: list[EvidenceLine] = []
    for block in tails:
        for offset, line in enumerate(block.lines):
            text = strip_ansi(line).strip()
            if text and _ERRORISH.search(text) and not text.startswith("File \""):
                lineno = block.first_lineno + offset if block.first_lineno > 0 else 0
                found.append(EvidenceLine(source=block.source, lineno=lineno, text=text[:1000]))
    return found[-_UNKNOWN_EVIDENCE_LINES:]


def _nearest_families(lines: Sequence[EvidenceLine], rules: RuleSet) -> tuple[str, ...]:
    """The rule categories whose words the error lines share most (at most three)."""
    words = {w for line in lines for w in _WORD.findall(line.text.lower())} - _STOP_WORDS
    if not words:
        return ()
    scores: dict[str, int] = {}
    for rule in rules.rules:
        if catch_all(rule):
            continue
        vocabulary = set(_WORD.findall(f"{rule.id} {rule.category} {rule.hint}".lower()))
        vocabulary |= {w for p in rule.patterns for w in _WORD.findall(p.pattern.lower())}
        shared = len(words & vocabulary)
        if shared:
            scores[rule.category] = max(scores.get(rule.category, 0), shared)
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return tuple(f"{category} ({count} shared words)" for category, count in ranked[:3])


def explain_unknown(diagnosis: Diagnosis, rules: RuleSet,
                     tails: Sequence[SummaryBlock]) -> Diagnosis:
    """An unknown failure says what it saw: the last error lines, the nearest rules."""
    if diagnosis.category != "unknown":
        return diagnosis
    lines = _error_lines(tails)
    nearest = _nearest_families(lines, rules)
    hint = diagnosis.hint
    if nearest:
        hint += f" Nearest rule families: {', '.join(nearest)}."
    return replace(diagnosis, evidence=diagnosis.evidence + tuple(lines), nearest=nearest, hint=hint)
