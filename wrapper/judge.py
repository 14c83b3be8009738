"""The attempt loop's view of the rule engine: scan, classify, decide, remember.

The loop (``wrapper.wrap``) talks to this small interface only, so its unit tests can
use a scripted judge while the end-to-end tests use :class:`RuleJudge`, which wires
the real rule catalogue, classifier, policy and history (the RULES area's modules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from wrapper.outcome import OutcomeRecord

from wrapper.backoff import Backoff


class Scanner(Protocol):
    def feed(self, line: str, stream: str = "stdout") -> object: ...

    @property
    def hits(self) -> tuple[Any, ...]: ...


class Judge(Protocol):
    """What the attempt loop needs from rules / classify / policy / history."""

    def new_scanner(self) -> Scanner: ...

    def load_history(self) -> Any: ...

    def classify(self, evidence: Mapping[str, Any]) -> Any: ...

    def decide(
        self, diagnosis: Any, history: Any, *, node: str, allocation: str,
        step: int | None, retries_used_in_allocation: int,
    ) -> Any: ...

    def record(self, outcome: OutcomeRecord) -> Any: ...


class RuleJudge:
    """The real judge: catalogue + user rules, ``classify``, ``decide``, ``HistoryStore``."""

    def __init__(
        self, *, rule_files: Sequence[Path], state_dir: Path, max_retries: int,
        max_reschedules: int, reset_on_progress: bool, backoff: Backoff | None = None,
    ) -> None:
        # Imported here so that `wrapper.wrap` stays importable on its own.
        from wrapper.classifier import LineScanner, judge_mapping, load_rules
        from wrapper.history import HistoryStore
        from wrapper.policy import Budgets, decide

        self._scanner_type = LineScanner
        self._judge = judge_mapping
        self._decide = decide
        self.rules = load_rules(tuple(rule_files))
        self.store = HistoryStore(state_dir)
        self.budgets = Budgets(
            max_retries=max_retries, max_reschedules=max_reschedules,
            reset_on_progress=reset_on_progress, backoff=backoff or Backoff(),
        )

    def new_scanner(self) -> Scanner:
        return self._scanner_type(self.rules)  # type: ignore[no-any-return]

    def load_history(self) -> Any:
        return self.store.load()

    def classify(self, evidence: Mapping[str, Any]) -> Any:
        # the one judge `resched classify` also decides with (wrapper.classifier.verdict)
        return self._judge(evidence, self.rules)

    def decide(
        self, diagnosis: Any, history: Any, *, node: str, allocation: str,
        step: int | None, retries_used_in_allocation: int,
    ) -> Any:
        return self._decide(
            diagnosis, history, self.budgets, node=node, allocation=allocation,
            step=step, retries_used_in_allocation=retries_used_in_allocation,
        )

    def record(self, outcome: OutcomeRecord) -> Any:
        # the history file is JSON: the typed record becomes a dict only here
        return self.store.record(outcome.to_dict())
