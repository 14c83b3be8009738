"""Classify how a training attempt ended: evidence + rules -> a Diagnosis.

The evidence is the exit status, the log lines that matched a rule while they streamed
(:class:`LineScanner`), torchelastic error files, the launcher's failure summary and the
Megatron tracker file. The winner is the first rule, in precedence order, whose match
holds; rules marked ``cascade`` (symptoms such as watchdog timeouts) win only when no
other rule matches, so the original reason is what the user reads.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from wrapper.classifier.launcher_logs import (
    LauncherReport,
    SummaryBlock,
    error_file_text_lines,
    recover,
    strip_ansi,
)
from wrapper.classifier.costs import RESTART_MAY_FIX, least_regret
from wrapper.long_lines import capped_blocks
from wrapper.decision import Decision
from wrapper.classifier.rules import CATALOGUE_PATH, Escalation, Match, Rule, RuleSet
from wrapper.classifier.scanner import LineScanner, LogHit
from wrapper.classifier.success import FLAG_RULE, Finished, find_finished, last_restart_seq, stopped_short

__all__ = [
    "Diagnosis", "Evidence", "EvidenceLine", "LineScanner", "LogHit",
    "classify", "format_diagnosis",
]

_EVIDENCE_HITS = 6  # log lines shown per diagnosis
_SUMMARY_TAIL_LINES = 800  # tail of each log searched for a ChildFailedError table
_READ_CHARS = 4 * 1024 * 1024


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


@dataclass(frozen=True)
class _Facts:
    codes: frozenset[int]  # exit codes; a signal S also appears as 128+S
    signals: frozenset[int]
    failed: bool
    hits_by_rule: Mapping[str, tuple[LogHit, ...]]
    exception_types: frozenset[str]
    root_exception: str | None  # the root-cause rank's exception type, when known
    tracker_status: str | None
    launcher: str | None
    hung: bool
    stop_requested: bool
    expect_finished: bool
    finished: bool
    crashed_at_exit_0: bool = False  # exit 0, but the log holds an uncaught traceback


def _status_sets(pairs: Iterable[tuple[int | None, int | None]]) -> tuple[frozenset[int], frozenset[int]]:
    codes: set[int] = set()
    signals: set[int] = set()
    for code, sig in pairs:
        if code is not None and code < 0:  # torchelastic reports a signal as -N
            sig = -code
            code = None
        if code is not None:
            codes.add(code)
            if 128 < code < 160:
                signals.add(code - 128)
        if sig is not None:
            signals.add(sig)
            codes.add(128 + sig)
    return frozenset(codes), frozenset(signals)


def _facts(evidence: Evidence, report: LauncherReport, hits: Sequence[LogHit]) -> _Facts:
    pairs: list[tuple[int | None, int | None]] = [(evidence.exit_code, evidence.signal)]
    if report.root_cause is not None:
        pairs.append((report.root_cause.exit_code, None))
    codes, signals = _status_sets(pairs)
    by_rule: dict[str, list[LogHit]] = {}
    for hit in hits:
        by_rule.setdefault(hit.rule_id, []).append(hit)
    exc: set[str] = set()
    for name in report.exception_types:
        exc.update({name, name.rsplit(".", 1)[-1]})
    failed = not (evidence.exit_code == 0 and evidence.signal is None)
    tracker = report.tracker_events[-1].status if report.tracker_events else None
    return _Facts(
        codes=codes, signals=signals, failed=failed,
        hits_by_rule={k: tuple(v) for k, v in by_rule.items()},
        exception_types=frozenset(exc), tracker_status=tracker, launcher=evidence.launcher,
        root_exception=report.root_cause.exception_type if report.root_cause else None,
        hung=evidence.hung, stop_requested=evidence.stop_signal is not None,
        expect_finished=evidence.expect_finished, finished=evidence.finished,
    )


def _block_hits(block: Match, hits: Sequence[LogHit]) -> list[LogHit]:
    return [h for h in hits if any(p.search(h.text) for p in block.patterns)]


def _block_matches(block: Match, facts: _Facts, rule_id: str) -> bool:
    if block.exit_codes is not None and not block.exit_codes & facts.codes:
        return False
    if block.signals is not None and not block.signals & facts.signals:
        return False
    if not block.requires_status and not facts.failed:
        return False
    if facts.crashed_at_exit_0 and block.exit_codes is not None and block.patterns == () \
            and block.exit_codes == frozenset({0}):
        return False  # "exit 0" alone proves nothing when the log holds a traceback
    flags = (
        (block.hung, facts.hung), (block.stop_requested, facts.stop_requested),
        (block.expect_finished, facts.expect_finished), (block.finished, facts.finished),
    )
    if any(want is not None and want != have for want, have in flags):
        return False
    if block.launcher is not None and facts.launcher not in block.launcher:
        return False
    if block.exception_types is not None and not block.exception_types & facts.exception_types:
        return False
    if block.tracker_status is not None and facts.tracker_status not in block.tracker_status:
        return False
    return not block.patterns or bool(_block_hits(block, facts.hits_by_rule.get(rule_id, ())))


def _catch_all(rule: Rule) -> bool:
    return all(block == Match() for block in rule.matches)


def _rule_matches(rule: Rule, facts: _Facts) -> bool:
    blocks = rule.matches
    if rule.trust_exception_type and facts.root_exception is not None:
        blocks = tuple(b for b in blocks if b.exception_types is not None)
    return any(_block_matches(block, facts, rule.id) for block in blocks)


_FALLBACK_FAILURE = Rule(
    id="unknown-failure", category="unknown", decision=Decision.RETRY, matches=(Match(),),
    source="<built-in>", deterministic=True, escalate=Escalation(after=2, to=Decision.RESCHEDULE),
    hint="No rule matched this failure. Add a rule for it with --rules FILE.yaml.",
)
_FALLBACK_SUCCESS = Rule(
    id="complete", category="complete", decision=Decision.COMPLETE, matches=(Match(exit_codes=frozenset({0})),),
    source="<built-in>", counts_as_failure=False, hint="Exit 0.",
)


TRACEBACK_AT_EXIT_0 = "traceback-at-exit-0"  # the catalogue rule that marks it


_WARNING_LINE = re.compile(
    r"^(?:\[[^\]]*\]:?\s*)*(?:\[?[WI]\d{4} |\[?(?:WARNING|INFO)\b|(?:\w+)?Warning: )")


def _first_hit(rule: Rule, facts: _Facts) -> LogHit | None:
    """The earliest log line that made one of the rule's matching blocks hold."""
    found: list[LogHit] = []
    for block in rule.matches:
        if block.patterns and _block_matches(block, facts, rule.id):
            found.extend(_block_hits(block, facts.hits_by_rule.get(rule.id, ())))
    errors = [h for h in found if not _WARNING_LINE.match(h.text)]
    # a rule's error-level line speaks for it before its warning-level ones
    return min(errors or found, key=lambda h: h.seq) if found else None


def _matched_by_status(rule: Rule, facts: _Facts) -> bool:
    """The rule holds on how the run ended (exit code, signal, run-state flags, Megatron
    tracker): exact facts, so they rank before log evidence. (An error file's exception
    type is not among them: it is often a generic wrapper such as DistBackendError, and
    the log line says more.)"""
    def exact(block: Match) -> bool:
        flags = (block.hung, block.stop_requested, block.expect_finished, block.finished)
        return (block.requires_status or block.tracker_status is not None
                or any(flag is not None for flag in flags))

    return any(exact(block) and _block_matches(block, facts, rule.id) for block in rule.matches)


def _primary_order(rule: Rule, index: int, facts: _Facts,
                   events: Mapping[str, int]) -> tuple[int, tuple[int, int], int, str]:
    """Sort key of a primary rule, and the words ``--explain`` prints for it.

    1. user rules, in their precedence order (they are the user's decision);
    2. rules that hold on the exit status / flags / tracker, in catalogue order;
    3. node-hardware rules (they exclude the node) matched in the log, in catalogue
       order: a hardware fault explains the software errors around it, whichever
       line came first (a socket error before the NVLink Xid is the Xid's victim);
    4. every other rule by its earliest log line: the first root-class error wins,
       the errors it caused come after it. A line logged at warning / info level (the
       program went on after it) ranks after the error lines; a rule matched only by
       an error file's exception type ranks after both;
    5. "complete" on a bare exit 0 (without the finished flag): the log's evidence of a
       stop or failure outranks it.
    """
    if not rule.source.endswith(CATALOGUE_PATH.name) or rule.source == "<built-in>":
        return (0, (index, 0), index, "user rule: user rules come first")
    if rule.decision is Decision.COMPLETE and not (facts.expect_finished and facts.finished):
        return (4, (index, 0), index, "a bare exit 0: any failure or stop the log shows outranks it")
    if _matched_by_status(rule, facts):
        return (1, (index, 0), index, "holds on the exit status / run state, not on a log line")
    hit = _first_hit(rule, facts)
    if rule.exclude_node:
        return (2, (index, 0), index, "a node / hardware fault: it outranks the errors it causes")
    if hit is None:
        return (3, (2, 0), index, "matched on an error file's exception type only")
    warning = bool(_WARNING_LINE.match(hit.text))
    level = "a warning-level line" if warning else "an error line"
    return (3, (1 if warning else 0, events.get(rule.id, hit.seq)), index,
            f"earliest root-class error wins: {level} at {_hit_line(hit).where()}")


_SAME_EVENT_LINES = 5  # error lines this close on one stream are one error (traceback + message)


def _hit_line(hit: LogHit) -> EvidenceLine:
    return EvidenceLine(hit.stream, hit.lineno, hit.text, getattr(hit, "after_byte", None))


def _events(rules: Sequence[Rule], facts: _Facts) -> dict[str, int]:
    """Rule id -> the first line of the error event its earliest hit belongs to.

    A traceback's frames, its exception line and the message after it come a few lines
    apart; rules matching lines of the same event tie, and the more specific rule (the
    earlier in the catalogue) wins among them."""
    firsts = sorted(((hit, rule.id) for rule in rules if (hit := _first_hit(rule, facts)) is not None),
                    key=lambda pair: pair[0].seq)
    events: dict[str, int] = {}
    anchor: LogHit | None = None
    previous: LogHit | None = None
    for hit, rule_id in firsts:
        if (anchor is None or previous is None or hit.stream != previous.stream
                or getattr(hit, "after_byte", None) != getattr(previous, "after_byte", None)
                or hit.lineno - previous.lineno > _SAME_EVENT_LINES):
            anchor = hit
        events[rule_id] = anchor.seq
        previous = hit
    return events


@dataclass(frozen=True)
class _Choice:
    winner: Rule
    matched: tuple[Rule, ...]
    ranked: tuple[RuleMatch, ...]
    why: str


def _choose(rules: RuleSet, facts: _Facts) -> _Choice:
    # rules that mark an event (success, a launcher restart) are evidence, never a cause
    matched = [rule for rule in rules.rules if rule.marks is None and _rule_matches(rule, facts)]
    if facts.crashed_at_exit_0:
        matched = [r for r in matched if r.decision is not Decision.COMPLETE]
    index = {rule.id: i for i, rule in enumerate(rules.rules)}
    catch_alls = [r for r in matched if _catch_all(r)]
    specific = [r for r in matched if not _catch_all(r)]
    candidates = [r for r in specific if not r.cascade and not r.exhausts_retries]
    events = _events(candidates, facts)
    keyed = {r.id: _primary_order(r, index[r.id], facts, events) for r in candidates}
    primary = sorted((r for r in specific if r.id in keyed), key=lambda r: keyed[r.id][:3])
    modifiers = [r for r in specific if r.exhausts_retries and not r.cascade]
    cascades = [r for r in specific if r.cascade]
    groups = (("primary", primary), ("modifier", modifiers), ("cascade", cascades),
              ("catch-all", catch_alls))
    ranked: list[RuleMatch] = []
    for name, group in groups:
        for rule in group:
            hit = _first_hit(rule, facts)
            rank = keyed[rule.id][3] if rule.id in keyed else {
                "modifier": "changes the winner's retry into a reschedule",
                "cascade": "a symptom of another failure: wins only when no primary rule matched",
                "catch-all": "matches every failure: the last resort",
            }[name]
            ranked.append(RuleMatch(
                rule_id=rule.id, decision=rule.decision, group=name, rank=rank,
                first_line=None if hit is None else _hit_line(hit)))
    for name, group in groups:
        if group:
            winner = group[0]
            why = f"{winner.id} won: {name} rule"
            if name == "primary" and len(group) > 1:
                why += f" ({keyed[winner.id][3]})"
            elif name != "primary":
                why += " (no primary rule matched)"
            return _Choice(winner, tuple(matched), tuple(ranked), why)
    fallback = _FALLBACK_FAILURE if facts.failed else _FALLBACK_SUCCESS
    return _Choice(fallback, tuple(matched), tuple(ranked), f"no rule matched: built-in {fallback.id}")


def _status_text(evidence: Evidence, report: LauncherReport) -> str:
    if evidence.signal is not None:
        text = f"signal {evidence.signal}"
    elif evidence.exit_code is None:
        text = "exit status unknown"
    else:
        text = f"exit {evidence.exit_code}"
    if evidence.launcher:
        text += f" ({evidence.launcher})"
    root = report.root_cause
    if root is not None:
        hidden = " (hidden by the launcher)" if evidence.exit_code == 1 and root.exit_code not in (None, 1) else ""
        text += f", root cause {root.describe()}{hidden}"
    if evidence.hung:
        text += ", killed by resched's hang detector"
    if evidence.stop_signal:
        text += f", resched was asked to stop ({evidence.stop_signal})"
    return text


def _evidence_lines(rule: Rule, facts: _Facts, report: LauncherReport, status: str) -> tuple[EvidenceLine, ...]:
    lines = [EvidenceLine(source="status", lineno=0, text=status)]
    if report.root_cause is not None:
        root = report.root_cause
        lines.append(EvidenceLine(source=root.source, lineno=root.lineno, text=root.describe()))
    if report.tracker_events:
        event = report.tracker_events[-1]
        lines.append(EvidenceLine(source=event.source, lineno=event.lineno, text=event.text))
    rule_hits = facts.hits_by_rule.get(rule.id, ())
    for hit in rule_hits[:_EVIDENCE_HITS]:
        lines.append(_hit_line(hit))
    return tuple(lines)


def _diagnose(evidence: Evidence, rules: RuleSet, report: LauncherReport, hits: Sequence[LogHit]) -> Diagnosis:
    finished = find_finished(rules, hits, expect_finished=evidence.expect_finished,
                             finished=evidence.finished, last_step=evidence.last_step,
                             total_steps=evidence.total_steps)
    evidence = _with_end_state(evidence, finished)
    facts = _facts(evidence, report, hits)
    if not facts.failed:
        # exit 0: only the launcher's last round speaks (earlier ones were recovered)
        since = last_restart_seq(rules, hits)
        facts = replace(facts, hits_by_rule=_by_rule(h for h in hits if h.seq > since))
        if finished is None and _crash_at_exit_0(rules, facts):
            facts = replace(facts, failed=True, crashed_at_exit_0=True)
    choice = _choose(rules, facts)
    rule, matched = choice.winner, choice.matched
    decision, hint = rule.decision, rule.hint
    if facts.crashed_at_exit_0:
        hint = (f"Exit 0, but the log shows an error and no sign that the training finished, "
                f"so this is no success: decided on the error. {hint}")
    exhausted = next((r for r in matched if r.exhausts_retries and r is not rule), None)
    if exhausted is not None and decision is Decision.RETRY:
        decision = Decision.RESCHEDULE
        hint = f"{hint} {exhausted.hint}".strip()
    status = _status_text(evidence, report)
    diagnosis = Diagnosis(
        rule_id=rule.id, category=rule.category, decision=decision, hint=hint,
        evidence=_evidence_lines(rule, facts, report, status),
        rank_exit_codes=report.rank_exit_codes, root_cause_rank=report.root_cause_rank,
        exclude_node=rule.exclude_node, counts_as_failure=rule.counts_as_failure,
        escalate=rule.escalate, deterministic=rule.deterministic, cascade=rule.cascade,
        status=status, also_matched=tuple(r.id for r in matched if r is not rule and not _catch_all(r)),
        matches=choice.ranked, why_won=choice.why,
    )
    if finished is not None:
        if facts.failed or facts.hung or decision is not Decision.COMPLETE:
            return _finished_wins(diagnosis, finished, facts, rules, hits)
        return _named_finish(diagnosis, finished)
    return _settle(diagnosis, rule, matched, facts)


def _named_finish(diagnosis: Diagnosis, finished: Finished) -> Diagnosis:
    """Exit 0 and evidence that the training finished: the decision names that evidence."""
    if finished.rule_id == FLAG_RULE:
        return replace(diagnosis, finished_by=finished.what)
    line = None if finished.hit is None else _hit_line(finished.hit)
    at = f" ({line.where()}: {line.text[:200]})" if line is not None else ""
    evidence = diagnosis.evidence[:1] + ((line,) if line is not None else ())
    return replace(diagnosis, rule_id=finished.rule_id, finished_by=finished.what,
                   evidence=evidence, hint=f"Training finished: {finished.what}{at}.",
                   why_won=f"{finished.rule_id} won: exit 0 and {finished.what}")


def _by_rule(hits: Iterable[LogHit]) -> dict[str, tuple[LogHit, ...]]:
    by_rule: dict[str, list[LogHit]] = {}
    for hit in hits:
        by_rule.setdefault(hit.rule_id, []).append(hit)
    return {k: tuple(v) for k, v in by_rule.items()}


def _with_end_state(evidence: Evidence, finished: Finished | None) -> Evidence:
    """The finished flag, or what stands for it when none was given: the training's own
    end-of-training line, or a progress line that names an end it did not reach."""
    if evidence.expect_finished:
        return evidence
    if finished is not None:
        return replace(evidence, expect_finished=True, finished=True)
    if stopped_short(evidence.last_step, evidence.total_steps):
        return replace(evidence, expect_finished=True, finished=False)
    return evidence


def _crash_at_exit_0(rules: RuleSet, facts: _Facts) -> bool:
    """Exit 0, no evidence that the training finished, and an error line of a failure
    rule (an uncaught traceback, a CUDA OOM...) in the last round: a launcher that hid
    its workers' failure (DeepSpeed's launcher, a shell ``|| true``), no success."""
    trial = replace(facts, failed=True)
    for rule in rules.rules:
        if (rule.marks is not None or _catch_all(rule) or rule.decision is Decision.COMPLETE
                or not rule.counts_as_failure or not rule.patterns or rule.exhausts_retries
                or (rule.cascade and rule.id != TRACEBACK_AT_EXIT_0)):
            continue
        if _rule_matches(rule, trial):
            hit = _first_hit(rule, trial)
            if hit is not None and not _WARNING_LINE.match(hit.text):
                return True
    return False


def _finished_wins(diagnosis: Diagnosis, finished: Finished, facts: _Facts, rules: RuleSet,
                   hits: Sequence[LogHit]) -> Diagnosis:
    """Evidence that the training finished outranks a failure after it (teardown) and
    the failures of rounds the launcher recovered: complete, naming what won."""
    line = None if finished.hit is None else _hit_line(finished.hit)
    failure_hits = facts.hits_by_rule.get(diagnosis.rule_id, ())
    first = min((h.seq for h in failure_hits), default=None)
    if finished.hit is not None and first is not None and first > finished.hit.seq:
        when = "came after it (teardown)"
    elif first is not None and first < last_restart_seq(rules, hits):
        when = "belongs to a round the launcher already recovered"
    else:
        when = "did not stop the training from finishing"
    at = f" ({line.where()}: {line.text[:200]})" if line is not None else ""
    failure = f"{diagnosis.rule_id}, {diagnosis.status}"
    recovered = when.startswith("belongs")
    if (diagnosis.decision is Decision.ABORT and diagnosis.counts_as_failure and not recovered
            and least_regret([Decision.COMPLETE, Decision.ABORT]) is Decision.ABORT):
        # A deterministic error after the end of training (the test / export step of the
        # same script): the weights are there, but what came after is broken and a restart
        # would fail the same way; a person must look, so no "complete" (docs/rules.md, Costs).
        return replace(diagnosis, finished_by=finished.what, hint=(
            f"The training finished ({finished.what}{at}), but a deterministic error "
            f"followed ({failure}): aborted so that someone fixes what runs after "
            f"training. {diagnosis.hint}"))
    hint = (f"The training finished: {finished.what}{at}. The failure the log also shows "
            f"({failure}) {when}: complete, nothing to restart.")
    evidence = diagnosis.evidence[:1] + ((line,) if line is not None else ()) + diagnosis.evidence[1:]
    return replace(
        diagnosis, rule_id=finished.rule_id, category="complete", decision=Decision.COMPLETE,
        hint=hint, evidence=evidence, exclude_node=False, counts_as_failure=False,
        escalate=None, deterministic=False, cascade=False, finished_by=finished.what,
        also_matched=(diagnosis.rule_id, *diagnosis.also_matched),
        why_won=(f"{finished.rule_id} won: evidence that the training finished outranks "
                 f"the failure ({diagnosis.rule_id}) that {when}"))


def _settle(diagnosis: Diagnosis, winner: Rule, matched: Sequence[Rule], facts: _Facts) -> Diagnosis:
    """Abort only on deterministic evidence: when the log also shows a failure a restart
    may fix (a start-up race, the network, a remote service, storage I/O), the cost table
    decides between the readings (wrapper.classifier.costs.least_regret): retry once, and the same
    failure again aborts."""
    if (diagnosis.decision is not Decision.ABORT or _is_user_rule(winner)
            or _matched_by_status(winner, facts)):
        return diagnosis  # a user's rule, or exact facts (an exit code, the tracker)
    candidates = [r for r in matched if r.marks is None and not _catch_all(r)]
    events = _events(candidates, facts)  # rule -> the error event its first line is in
    own = events.get(winner.id)
    order = {rule.id: i for i, rule in enumerate(matched)}  # precedence (catalogue) order
    # only an earlier event doubts the abort: later ones are its echo (peers losing the
    # dead rank); within one event (a traceback and its message) the more specific rule,
    # the earlier in the catalogue, speaks (also when its line is only a warning)
    doubts = [r for r in candidates if r.category in RESTART_MAY_FIX and r.id in events
              and (own is None or events[r.id] < own
                   or (events[r.id] == own and order[r.id] < order[winner.id]))]
    if not doubts:
        return diagnosis
    chosen = least_regret([Decision.ABORT, *(r.decision for r in doubts)])
    if chosen is Decision.ABORT:
        return diagnosis
    doubt = next(r for r in doubts if r.decision is chosen)
    # the reading that decides is the one named: the restart-may-fix rule, the abort
    # rule stays in also_matched and is what a repeat of this failure aborts on
    return replace(
        diagnosis, rule_id=doubt.id, category=doubt.category, decision=chosen,
        deterministic=True, exclude_node=False, cascade=False,
        escalate=Escalation(after=1, to=Decision.ABORT, scope="job"),
        also_matched=(diagnosis.rule_id, *(m for m in diagnosis.also_matched if m != doubt.id)),
        hint=(f"{doubt.hint} The log also shows {diagnosis.rule_id} (an abort), but a first "
              f"occurrence next to a failure a restart may fix is not aborted: {chosen} once; "
              f"the same failure again aborts."),
        why_won=(f"{doubt.id} won: {diagnosis.rule_id} would abort, but {doubt.id} at or "
                 f"before its line may be the cause; least regret: {chosen} "
                 f"(docs/rules.md, Costs)"))


def _is_user_rule(rule: Rule) -> bool:
    return not rule.source.endswith(CATALOGUE_PATH.name) or rule.source == "<built-in>"


_ERRORISH = re.compile(
    r"error|fail|fatal|exception|abort|killed|terminat|denied|refused|timed? ?out|"
    r"cannot|could not|unable|segmentation|core dumped|\bnan\b|\binf\b|xid", re.IGNORECASE)
_UNKNOWN_EVIDENCE_LINES = 5
_WORD = re.compile(r"[a-z][a-z0-9]{3,}")
_STOP_WORDS = frozenset(
    "this that with from have were will when then than into only same your rule rules "
    "retried retry reschedule rescheduled abort aborted again node error errors failed "
    "failure the and for not".split())


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
        if _catch_all(rule):
            continue
        vocabulary = set(_WORD.findall(f"{rule.id} {rule.category} {rule.hint}".lower()))
        vocabulary |= {w for p in rule.patterns for w in _WORD.findall(p.pattern.lower())}
        shared = len(words & vocabulary)
        if shared:
            scores[rule.category] = max(scores.get(rule.category, 0), shared)
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return tuple(f"{category} ({count} shared words)" for category, count in ranked[:3])


def _explain_unknown(diagnosis: Diagnosis, rules: RuleSet,
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


def _error_file_hits(scanner: LineScanner, error_files: Sequence[Path]) -> None:
    for path in error_files:
        for line in error_file_text_lines(Path(path)):
            scanner.feed(line, stream=str(path))


def classify(evidence: Evidence, rules: RuleSet,
             tails: Sequence[SummaryBlock] | None = None) -> Diagnosis:
    """The rule engine's diagnosis of one attempt (:func:`wrapper.classifier.verdict.judge` adds
    what NVRx and the launcher reported: call that, it is the one judge)."""
    if tails is None:
        tails = [SummaryBlock(source="launcher", lines=tuple(evidence.launcher_summary_lines),
                              first_lineno=0)]
    report = recover(error_files=evidence.error_files, summaries=tails, tracker_file=evidence.tracker_file)
    scanner = LineScanner(rules)
    _error_file_hits(scanner, evidence.error_files)
    # error-file hits come after every log hit in time order
    offset = 1 + max((h.seq for h in evidence.hits), default=-1)
    hits = sorted(evidence.hits, key=lambda h: h.seq) + [replace(h, seq=h.seq + offset)
                                                         for h in scanner.hits]
    return _explain_unknown(_diagnose(evidence, rules, report, hits), rules, tails)


class _BlockReader(Protocol):
    def feed_text(self, text: str, stream: str) -> object: ...


def _scan_log(path: Path, reader: _BlockReader) -> SummaryBlock:
    """Feed a saved log in blocks of whole lines (the prefilter runs over each block in
    C) and keep its tail, where a launcher's failure summary is."""
    tail: deque[str] = deque(maxlen=_SUMMARY_TAIL_LINES)
    count = 0
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        # every line cut to a bounded length (wrapper/long_lines.py): a 1 GiB line is
        # neither copied again and again nor held whole
        for block in capped_blocks(handle.read, _READ_CHARS):
            reader.feed_text(block, str(path))
            # as LineScanner counts: "\n" only (not splitlines()), a last line without one
            count += block.count("\n") + (0 if block.endswith("\n") else 1)
            # split off the tail only (a full split of every block cost as much as scanning it)
            lines = block.rsplit("\n", _SUMMARY_TAIL_LINES + 1)
            if lines[-1] == "":
                lines.pop()
            tail.extend(lines[-_SUMMARY_TAIL_LINES:])
    return SummaryBlock(source=str(path), lines=tuple(tail), first_lineno=count - len(tail) + 1)


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
