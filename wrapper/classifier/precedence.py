"""Which rule wins: the facts of one attempt, which rules hold on them, and their order.

The winner is the first rule, in precedence order, whose match holds; rules marked
``cascade`` (symptoms such as watchdog timeouts) win only when no other rule matches, so
the original reason is what the user reads. :func:`choose` also records every rule that
matched and why it stands where it does (``resched classify --explain``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from wrapper.classifier.diagnosis import Evidence, EvidenceLine, RuleMatch
from wrapper.classifier.launcher_logs import LauncherReport
from wrapper.classifier.line_prefix import search, warning_level
from wrapper.classifier.rules import CATALOGUE_PATH, Escalation, Match, Rule, RuleSet
from wrapper.classifier.scanner import LogHit
from wrapper.decision import Decision


@dataclass(frozen=True)
class Facts:
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


def gather_facts(evidence: Evidence, report: LauncherReport, hits: Sequence[LogHit]) -> Facts:
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
    return Facts(
        codes=codes, signals=signals, failed=failed,
        hits_by_rule={k: tuple(v) for k, v in by_rule.items()},
        exception_types=frozenset(exc), tracker_status=tracker, launcher=evidence.launcher,
        root_exception=report.root_cause.exception_type if report.root_cause else None,
        hung=evidence.hung, stop_requested=evidence.stop_signal is not None,
        expect_finished=evidence.expect_finished, finished=evidence.finished,
    )


def _block_hits(block: Match, hits: Sequence[LogHit]) -> list[LogHit]:
    return [h for h in hits if any(search(p, h.text) for p in block.patterns)]


def _block_matches(block: Match, facts: Facts, rule_id: str) -> bool:
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


def catch_all(rule: Rule) -> bool:
    return all(block == Match() for block in rule.matches)


def rule_matches(rule: Rule, facts: Facts) -> bool:
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




def first_hit(rule: Rule, facts: Facts) -> LogHit | None:
    """The earliest log line that made one of the rule's matching blocks hold."""
    found: list[LogHit] = []
    for block in rule.matches:
        if block.patterns and _block_matches(block, facts, rule.id):
            found.extend(_block_hits(block, facts.hits_by_rule.get(rule.id, ())))
    errors = [h for h in found if not warning_level(h.text)]
    # a rule's error-level line speaks for it before its warning-level ones
    return min(errors or found, key=lambda h: h.seq) if found else None


def matched_by_status(rule: Rule, facts: Facts) -> bool:
    """The rule holds on how the run ended (exit code, signal, run-state flags, Megatron
    tracker): exact facts, so they rank before log evidence. (An error file's exception
    type is not among them: it is often a generic wrapper such as DistBackendError, and
    the log line says more.)"""
    def exact(block: Match) -> bool:
        flags = (block.hung, block.stop_requested, block.expect_finished, block.finished)
        return (block.requires_status or block.tracker_status is not None
                or any(flag is not None for flag in flags))

    return any(exact(block) and _block_matches(block, facts, rule.id) for block in rule.matches)


def _primary_order(rule: Rule, index: int, facts: Facts,
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
    if matched_by_status(rule, facts):
        return (1, (index, 0), index, "holds on the exit status / run state, not on a log line")
    hit = first_hit(rule, facts)
    if rule.exclude_node:
        return (2, (index, 0), index, "a node / hardware fault: it outranks the errors it causes")
    if hit is None:
        return (3, (2, 0), index, "matched on an error file's exception type only")
    warning = warning_level(hit.text)
    level = "a warning-level line" if warning else "an error line"
    return (3, (1 if warning else 0, events.get(rule.id, hit.seq)), index,
            f"earliest root-class error wins: {level} at {hit_line(hit).where()}")


_SAME_EVENT_LINES = 5  # error lines this close on one stream are one error (traceback + message)


def hit_line(hit: LogHit) -> EvidenceLine:
    return EvidenceLine(hit.stream, hit.lineno, hit.text, getattr(hit, "after_byte", None))


def error_events(rules: Sequence[Rule], facts: Facts) -> dict[str, int]:
    """Rule id -> the first line of the error event its earliest hit belongs to.

    A traceback's frames, its exception line and the message after it come a few lines
    apart; rules matching lines of the same event tie, and the more specific rule (the
    earlier in the catalogue) wins among them."""
    firsts = sorted(((hit, rule.id) for rule in rules if (hit := first_hit(rule, facts)) is not None),
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
class Choice:
    winner: Rule
    matched: tuple[Rule, ...]
    ranked: tuple[RuleMatch, ...]
    why: str


def choose(rules: RuleSet, facts: Facts) -> Choice:
    # rules that mark an event (success, a launcher restart) are evidence, never a cause
    matched = [rule for rule in rules.rules if rule.marks is None and rule_matches(rule, facts)]
    if facts.crashed_at_exit_0:
        matched = [r for r in matched if r.decision is not Decision.COMPLETE]
    index = {rule.id: i for i, rule in enumerate(rules.rules)}
    catch_alls = [r for r in matched if catch_all(r)]
    specific = [r for r in matched if not catch_all(r)]
    candidates = [r for r in specific if not r.cascade and not r.exhausts_retries]
    events = error_events(candidates, facts)
    keyed = {r.id: _primary_order(r, index[r.id], facts, events) for r in candidates}
    primary = sorted((r for r in specific if r.id in keyed), key=lambda r: keyed[r.id][:3])
    modifiers = [r for r in specific if r.exhausts_retries and not r.cascade]
    cascades = [r for r in specific if r.cascade]
    groups = (("primary", primary), ("modifier", modifiers), ("cascade", cascades),
              ("catch-all", catch_alls))
    ranked: list[RuleMatch] = []
    for name, group in groups:
        for rule in group:
            hit = first_hit(rule, facts)
            rank = keyed[rule.id][3] if rule.id in keyed else {
                "modifier": "changes the winner's retry into a reschedule",
                "cascade": "a symptom of another failure: wins only when no primary rule matched",
                "catch-all": "matches every failure: the last resort",
            }[name]
            ranked.append(RuleMatch(
                rule_id=rule.id, decision=rule.decision, group=name, rank=rank,
                first_line=None if hit is None else hit_line(hit)))
    for name, group in groups:
        if group:
            winner = group[0]
            why = f"{winner.id} won: {name} rule"
            if name == "primary" and len(group) > 1:
                why += f" ({keyed[winner.id][3]})"
            elif name != "primary":
                why += " (no primary rule matched)"
            return Choice(winner, tuple(matched), tuple(ranked), why)
    fallback = _FALLBACK_FAILURE if facts.failed else _FALLBACK_SUCCESS
    return Choice(fallback, tuple(matched), tuple(ranked), f"no rule matched: built-in {fallback.id}")
