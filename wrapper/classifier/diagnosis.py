"""What the classifier hands on: the evidence of one attempt, the log lines it cites, the
diagnosis (rule, decision, why it won), and the text ``resched classify`` prints for it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wrapper.classifier.rules import Escalation
from wrapper.classifier.scanner import LogHit
from wrapper.decision import Decision

__all__ = ["Diagnosis", "Evidence", "EvidenceLine", "RuleMatch", "format_diagnosis"]


@dataclass(frozen=True)
class Evidence:
    exit_code: int | None
    signal: int | None = None
    hits: tuple[LogHit, ...] = ()
    error_files: tuple[Path, ...] = ()
    launcher_summary_lines: tuple[str, ...] = ()
    tracker_file: Path | None = None
    hung: bool = False
    stop_signal: str | None = None
    expect_finished: bool = False
    finished: bool = False
    launcher: str | None = None
    # progress read from the output (``iteration N/ TOTAL``): the last N and the end
    last_step: int | None = None
    total_steps: int | None = None


@dataclass(frozen=True)
class EvidenceLine:
    source: str
    lineno: int
    text: str
    # Set when output before this line went by unscanned and uncounted (a zero-copy
    # burst): ``lineno`` counts from this byte offset of the stream, not from its start.
    after_byte: int | None = None

    def where(self) -> str:
        """``stdout line 12``; ``stdout line 3 counted from byte 1048576``; ``status``."""
        if not self.lineno:
            return self.source
        if self.after_byte is None:
            return f"{self.source} line {self.lineno}"
        return f"{self.source} line {self.lineno} counted from byte {self.after_byte}"

    def to_dict(self) -> dict[str, Any]:
        position = {} if self.after_byte is None else {"after_byte": self.after_byte}
        return {"source": self.source, "line": self.lineno, **position, "text": self.text}


@dataclass(frozen=True)
class RuleMatch:
    """One rule that matched, and where it stands in the choice (``--explain``)."""

    rule_id: str
    decision: Decision
    group: str  # primary / modifier / cascade / catch-all
    rank: str  # why it stands where it does among its group
    first_line: EvidenceLine | None  # the earliest log line that made it match


@dataclass(frozen=True)
class Diagnosis:
    rule_id: str
    category: str
    decision: Decision
    hint: str
    evidence: tuple[EvidenceLine, ...]
    rank_exit_codes: Mapping[int, int]
    root_cause_rank: int | None
    exclude_node: bool
    counts_as_failure: bool
    # what the policy needs from the rule (additive to the contract)
    escalate: Escalation | None = None
    deterministic: bool = False
    cascade: bool = False
    status: str = ""  # "exit 1 (torchrun), rank 1 exit 16"
    also_matched: tuple[str, ...] = field(default=())
    matches: tuple[RuleMatch, ...] = field(default=())  # every rule that matched, winner first
    why_won: str = ""
    nearest: tuple[str, ...] = field(default=())  # for unknowns: the rule families closest
    finished_by: str = ""  # the evidence that the training finished, when it decided
    # what NVRx reported (wrapper.classifier.nvrx_verdict.NvrxFindings), for the outcome record
    nvrx: Any = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule_id,
            "category": self.category,
            "decision": str(self.decision),
            "hint": self.hint,
            "status": self.status,
            "evidence": [e.to_dict() for e in self.evidence],
            "rank_exit_codes": {str(rank): code for rank, code in self.rank_exit_codes.items()},
            "root_cause_rank": self.root_cause_rank,
            "exclude_node": self.exclude_node,
            "counts_as_failure": self.counts_as_failure,
            "cascade": self.cascade,
            "deterministic": self.deterministic,
            "escalate": None if self.escalate is None else {
                "after": self.escalate.after, "to": str(self.escalate.to), "scope": self.escalate.scope,
            },
            "also_matched": list(self.also_matched),
            "why_won": self.why_won,
            "matches": [
                {"rule": m.rule_id, "decision": str(m.decision), "group": m.group, "rank": m.rank,
                 "line": None if m.first_line is None else m.first_line.to_dict()}
                for m in self.matches
            ],
            "nearest": list(self.nearest),
            "finished_by": self.finished_by,
        }



def format_diagnosis(diagnosis: Diagnosis, *, explain: bool = False) -> str:
    """The human text ``resched classify`` prints."""
    out = [
        f"rule: {diagnosis.rule_id}   category: {diagnosis.category}   decision: {diagnosis.decision}",
        f"status: {diagnosis.status}",
    ]
    if diagnosis.rank_exit_codes:
        codes = ", ".join(f"rank {r}: {c}" for r, c in diagnosis.rank_exit_codes.items())
        out.append(f"rank exit codes: {codes}; root cause rank: {diagnosis.root_cause_rank}")
    if diagnosis.exclude_node:
        out.append("node: mark for exclusion")
    out.append("evidence:")
    for line in diagnosis.evidence[1:] or diagnosis.evidence:
        out.append(f"  {line.where()}: {line.text}")
    if diagnosis.also_matched:
        out.append(f"also matched: {', '.join(diagnosis.also_matched)}")
    if explain:
        out.append(f"why: {diagnosis.why_won}")
        out.append("every rule that matched, in the order they were weighed:")
        for match in diagnosis.matches or ():
            out.append(f"  {match.rule_id} ({match.group}, {match.decision}): {match.rank}")
            if match.first_line is not None:
                out.append(f"      {match.first_line.where()}: {match.first_line.text[:200]}")
        if not diagnosis.matches:
            out.append("  (none)")
    out.append(f"hint: {diagnosis.hint}")
    return "\n".join(out)
