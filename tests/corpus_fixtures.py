"""The public failure-log corpus (tests/fixtures/corpus): load it, classify every entry
the way `resched classify` does, and tabulate the answers.

Shared by tests/test_corpus_*.py and benchmarks/classify_bench.py, so the accuracy the
test guards and the confusion matrix the benchmark prints come from the same code.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from wrapper.classifier import classify_artifacts
from wrapper.classifier.rules import RuleSet, load_rules

CORPUS_DIR = Path(__file__).resolve().parent / "fixtures" / "corpus"
INDEX = CORPUS_DIR / "corpus.yaml"
LABELS = ("retry", "reschedule", "abort", "complete")
_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
_URL = re.compile(r"^https://(?:github\.com/[^/\s]+/[^/\s]+/(?:issues|pull|discussions)/\d+|\S+)$")


@dataclass(frozen=True)
class CorpusEntry:
    id: str
    url: str
    project: str
    label: str
    why: str
    exit_code: int | None
    signal: int | None

    @property
    def log(self) -> Path:
        return CORPUS_DIR / "logs" / f"{self.id}.log"


@dataclass(frozen=True)
class Verdict:
    entry: CorpusEntry
    decision: str
    rule_id: str
    key_line: str

    @property
    def right(self) -> bool:
        return self.decision == self.entry.label


def load_corpus(index: Path = INDEX) -> tuple[CorpusEntry, ...]:
    data = yaml.safe_load(index.read_text(encoding="utf-8"))
    entries = []
    for raw in data["entries"]:
        entries.append(CorpusEntry(
            id=raw["id"], url=raw["url"], project=raw["project"], label=raw["label"],
            why=raw["why"], exit_code=raw.get("exit_code"), signal=raw.get("signal"),
        ))
    return tuple(entries)


def check_entry(entry: CorpusEntry) -> list[str]:
    """What is wrong with an entry's metadata (empty when nothing)."""
    problems = []
    if not _ID.match(entry.id):
        problems.append(f"id {entry.id!r}: lower-case letters, digits, '.', '-' only")
    if not _URL.match(entry.url):
        problems.append(f"{entry.id}: url {entry.url!r} is not a thread address")
    if entry.label not in LABELS:
        problems.append(f"{entry.id}: label {entry.label!r} is not one of {LABELS}")
    if not entry.why.strip() or not entry.project.strip():
        problems.append(f"{entry.id}: 'why' and 'project' must be filled in")
    if entry.exit_code is not None and entry.signal is not None:
        problems.append(f"{entry.id}: give exit_code or signal, not both")
    if entry.label == "complete" and entry.exit_code != 0:
        problems.append(f"{entry.id}: a 'complete' run exits 0")
    if not entry.log.is_file() or not entry.log.read_text(encoding="utf-8").strip():
        problems.append(f"{entry.id}: {entry.log} is missing or empty")
    return problems


def classify_entry(entry: CorpusEntry, rules: RuleSet) -> Verdict:
    diagnosis = classify_artifacts(
        logs=[entry.log], error_files=[], exit_code=entry.exit_code, signal=entry.signal, rules=rules,
    )
    lines = [e.text for e in diagnosis.evidence if e.source != "status"]
    return Verdict(entry=entry, decision=str(diagnosis.decision), rule_id=diagnosis.rule_id,
                   key_line=lines[-1] if lines else _last_error_line(entry.log) or diagnosis.status)


_ERRORISH = re.compile(
    r"error|fail|fatal|exception|cancel|kill|abort|xid|\bnan\b|terminat|lost|unable|unavailable|"
    r"busy|timed? ?out|refused|reset by|assert|out of memory|evicted|preempt|signal",
    re.IGNORECASE,
)


def _last_error_line(log: Path) -> str | None:
    """The last line that looks like an error: what a reader of a miss looks at first."""
    found = [line.strip() for line in log.read_text(encoding="utf-8").splitlines() if _ERRORISH.search(line)]
    return found[-1] if found else None


def classify_corpus(rules: RuleSet | None = None) -> tuple[Verdict, ...]:
    rules = rules if rules is not None else load_rules()
    return tuple(classify_entry(entry, rules) for entry in load_corpus())


def accuracy(verdicts: tuple[Verdict, ...]) -> float:
    return sum(v.right for v in verdicts) / len(verdicts)


def confusion(verdicts: tuple[Verdict, ...]) -> Counter[tuple[str, str]]:
    """(expected label, resched's decision) -> count."""
    return Counter((v.entry.label, v.decision) for v in verdicts)


def format_confusion(verdicts: tuple[Verdict, ...]) -> str:
    table = confusion(verdicts)
    answers = list(LABELS) + sorted({d for _, d in table} - set(LABELS))
    width = max(len(a) for a in answers) + 2
    out = ["expected \\ resched".ljust(20) + "".join(a.rjust(width) for a in answers) + "total".rjust(width)]
    for label in LABELS:
        row = [table.get((label, a), 0) for a in answers]
        out.append(label.ljust(20) + "".join(str(n).rjust(width) for n in row) + str(sum(row)).rjust(width))
    right = sum(v.right for v in verdicts)
    out.append(f"right: {right}/{len(verdicts)} = {right / len(verdicts):.1%}")
    return "\n".join(out)


def format_misses(verdicts: tuple[Verdict, ...]) -> str:
    out = []
    for v in verdicts:
        if not v.right:
            key = v.key_line if len(v.key_line) <= 200 else v.key_line[:197] + "..."
            out.append(f"- {v.entry.id}: expected {v.entry.label}, resched {v.decision} ({v.rule_id}); "
                       f"key: {key}  <{v.entry.url}>")
    return "\n".join(out)
