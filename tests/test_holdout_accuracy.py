"""Held-out accuracy of `resched classify` on real failure logs it was never tuned on.

The held-out set (tests/fixtures/holdout/holdout.yaml + logs/) holds real logs copied from
public issue threads that are NOT cited anywhere in tests/fixtures/corpus or
tests/fixtures/logs, labelled with the right decision per the failure taxonomy before
resched was run on them. It is loaded and classified with the same code as the public
corpus (tests/corpus_fixtures.py: load_corpus, check_entry, classify_entry), so the
number here is comparable to the corpus accuracy.

The threshold is a REGRESSION GUARD, not a target: it is the accuracy measured when the
set was added (2026-11-23: 26/28 = 92.9%), rounded DOWN to the nearest 0.05 (0.90). Do not
tune rules against these logs; that would turn the held-out set into a training set.

Print the confusion matrix and every miss with:
    .venv/bin/python -m pytest tests/test_holdout_accuracy.py -s -q
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from corpus_fixtures import (
    CorpusEntry,
    accuracy,
    check_entry,
    classify_entry,
    format_confusion,
    format_misses,
    load_corpus,
)
from wrapper.classifier.rules import load_rules

HOLDOUT_DIR = Path(__file__).resolve().parent / "fixtures" / "holdout"
HOLDOUT_INDEX = HOLDOUT_DIR / "holdout.yaml"
MIN_ACCURACY = 0.90  # measured 26/28 = 0.929 on 2026-11-23, rounded down to 0.05


@dataclasses.dataclass(frozen=True)
class HoldoutEntry(CorpusEntry):
    """A corpus entry whose log lives under fixtures/holdout/logs."""

    @property
    def log(self) -> Path:
        return HOLDOUT_DIR / "logs" / f"{self.id}.log"


def load_holdout() -> tuple[HoldoutEntry, ...]:
    return tuple(HoldoutEntry(**dataclasses.asdict(e)) for e in load_corpus(HOLDOUT_INDEX))


@pytest.fixture(scope="module")
def verdicts():
    rules = load_rules()
    return tuple(classify_entry(entry, rules) for entry in load_holdout())


def test_holdout_entries_are_well_formed():
    entries = load_holdout()
    problems = [p for e in entries for p in check_entry(e)]
    assert not problems, "\n".join(problems)
    assert len({e.id for e in entries}) == len(entries), "duplicate ids"


def test_holdout_does_not_reuse_corpus_threads():
    corpus_urls = {e.url for e in load_corpus()}
    reused = [e.id for e in load_holdout() if e.url in corpus_urls]
    assert not reused, f"held-out entries reuse corpus threads: {reused}"


def test_holdout_accuracy(verdicts):
    print("\n" + format_confusion(verdicts))
    misses = format_misses(verdicts)
    if misses:
        print("misses:\n" + misses)
    assert accuracy(verdicts) >= MIN_ACCURACY, (
        f"held-out accuracy {accuracy(verdicts):.1%} fell below the guard {MIN_ACCURACY:.0%}\n{misses}"
    )
