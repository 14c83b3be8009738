"""Classify how a training attempt ended: evidence + rules -> a Diagnosis.

The evidence is the exit status, the log lines that matched a rule while they streamed
(:class:`LineScanner`), torchelastic error files, the launcher's failure summary and the
Megatron tracker file. Which rule wins is ``precedence.py``'s; here the winner meets the
evidence that the training finished (``success.py``: it outranks a teardown failure) and
the cost table (``costs.py``: no abort on a first occurrence next to a failure a restart
may fix). The types handed on are ``diagnosis.py``'s, re-exported here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from wrapper.classifier.costs import RESTART_MAY_FIX, least_regret
from wrapper.classifier.diagnosis import Diagnosis, Evidence, EvidenceLine, format_diagnosis
from wrapper.classifier.launcher_logs import (
    LauncherReport,
    SummaryBlock,
    error_file_text_lines,
    recover,
)
from wrapper.classifier.line_prefix import warning_level
from wrapper.classifier.precedence import (
    Facts,
    catch_all,
    choose,
    error_events,
    first_hit,
    gather_facts,
    hit_line,
    matched_by_status,
    rule_matches,
)
from wrapper.classifier.rules import CATALOGUE_PATH, Escalation, Rule, RuleSet
from wrapper.classifier.scanner import LineScanner, LogHit
from wrapper.classifier.success import (
    FLAG_RULE,
    OUTPUT_AT_RISK,
    Finished,
    find_finished,
    first_exit_line,
    in_thread_tracebacks,
    last_restart_seq,
    normal_exit,
    raised_before,
    rounds_with,
    stopped_short,
)
from wrapper.classifier.unknown import explain_unknown
from wrapper.classifier.unraisable import without_ignored
from wrapper.decision import Decision
from wrapper.long_lines import capped_blocks

__all__ = [
    "Diagnosis", "Evidence", "EvidenceLine", "LineScanner", "LogHit",
    "classify", "format_diagnosis",
]

_EVIDENCE_HITS = 6  # log lines shown per diagnosis
_SUMMARY_TAIL_LINES = 800  # tail of each log searched for a ChildFailedError table
_READ_CHARS = 4 * 1024 * 1024


def _names_a_crash_at_exit_0(rule: Rule) -> bool:
    """A cascade rule written for exit 0 too (a block of ``exit_codes: [0]`` and log lines:
    an uncaught traceback, a process's death by a signal): its line says a crash even
    when the exit status does not. Other cascades (a watchdog timeout...) are symptoms."""
    return any(block.exit_codes == frozenset({0}) and block.patterns for block in rule.matches)



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


def _evidence_lines(rule: Rule, facts: Facts, report: LauncherReport, status: str) -> tuple[EvidenceLine, ...]:
    lines = [EvidenceLine(source="status", lineno=0, text=status)]
    if report.root_cause is not None:
        root = report.root_cause
        lines.append(EvidenceLine(source=root.source, lineno=root.lineno, text=root.describe()))
    if report.tracker_events:
        event = report.tracker_events[-1]
        lines.append(EvidenceLine(source=event.source, lineno=event.lineno, text=event.text))
    rule_hits = facts.hits_by_rule.get(rule.id, ())
    for hit in rule_hits[:_EVIDENCE_HITS]:
        lines.append(hit_line(hit))
    return tuple(lines)


def _diagnose(evidence: Evidence, rules: RuleSet, report: LauncherReport, hits: Sequence[LogHit]) -> Diagnosis:
    finished = find_finished(rules, hits, expect_finished=evidence.expect_finished,
                             finished=evidence.finished, last_step=evidence.last_step,
                             total_steps=evidence.total_steps)
    exited = _normal_exit_for_unknown_status(evidence, report, rules, hits, finished)
    if exited is not None:
        # read as exit 0; when the log shows an error after all, the unknown status stays
        # and the failure is decided as such (no "exit 0" in its words)
        as_exit_0 = _decide(replace(evidence, exit_code=0), rules, report, hits, finished, exited)
        if as_exit_0 is not None:
            return as_exit_0
    in_teardown = _teardown_reading(evidence, report, rules, hits, finished)
    if in_teardown is not None:
        return in_teardown
    decided = _decide(evidence, rules, report, hits, finished, None)
    assert decided is not None  # only a normal-exit reading gives up
    return decided


# How a process ends when it crashes in its own teardown: abort() ("terminate called
# after throwing ...", a C++ destructor's uncaught exception), a segfault or bus error in
# a destructor. An exit code (1, 2...) is the program's own verdict and is never read so.
_TEARDOWN_SIGNALS = frozenset({6, 7, 11})


def _teardown_reading(evidence: Evidence, report: LauncherReport, rules: RuleSet,
                      hits: Sequence[LogHit], finished: Finished | None) -> Diagnosis | None:
    """The process was already exiting (a ``marks: exit`` line: ProcessGroupNCCL's exit-time
    warning, the CUDA driver unloading, an experiment tracker's end-of-run footer) and
    nothing failed before that line; it then crashed by a signal, hung, or its status is
    unknown or 0 with errors after the line: the crash or hang is teardown, the program's
    work was done: complete, naming the line. None when that reading does not hold (an
    error before the line, progress naming an end not reached, an exit code the program
    chose, a stop request, a launcher naming a rank's exception)."""
    if finished is not None or evidence.expect_finished or evidence.stop_signal is not None:
        return None
    root = report.root_cause
    if root is not None and (root.exception_type or root.signal not in _TEARDOWN_SIGNALS):
        return None
    code, sig = evidence.exit_code, evidence.signal
    crashed = (sig in _TEARDOWN_SIGNALS or (code is not None and code - 128 in _TEARDOWN_SIGNALS)
               or (root is not None and code == 1))
    if not (crashed or evidence.hung or (sig is None and code in (None, 0))):
        return None
    exiting = first_exit_line(rules, hits)
    if exiting is None or raised_before(rules, hits, exiting) is not None:
        return None  # no exit line, or an exception (of no rule) was what ended the process
    if code == 0 and _verdict_after(rules, hits, exiting):
        return None  # the program (or the wrapper that ran it) logged its failure at exit 0
    if _group_stopped_after(hits, exiting):
        return None  # the launcher then stopped workers still running: one of them had failed
    before = [hit for hit in hits if hit.seq <= exiting.seq]
    as_exit_0 = _decide(replace(evidence, exit_code=0, signal=None, hung=False), rules,
                        replace(report, root_cause=None), before, None, exiting)
    if as_exit_0 is None or as_exit_0.decision is not Decision.COMPLETE:
        return None
    line = hit_line(exiting)
    status = _status_text(evidence, report)
    after = ("resched's hang detector stopped it" if evidence.hung
             else "" if sig is None and code in (None, 0) and root is None
             else f"it then ended by {status}")
    if not after:
        later = [hit for hit in hits if hit.seq > exiting.seq and hit.rule_id != exiting.rule_id]
        if not later:
            return None  # nothing after the line: the plain normal-exit reading says it
        after = "errors followed it"
    hint = (f"The process was already exiting ({line.where()}: {line.text[:200]}) and the "
            f"log shows no error before that; {after}: a crash or hang in teardown, after "
            f"the program's work was done. Complete, nothing to restart.")
    return replace(
        as_exit_0, status=status,
        evidence=(EvidenceLine(source="status", lineno=0, text=status), line),
        hint=hint, why_won=(f"{exiting.rule_id} won: the process was exiting at that line "
                            f"and nothing failed before it (teardown)"))


def _decide(evidence: Evidence, rules: RuleSet, report: LauncherReport, hits: Sequence[LogHit],
            finished: Finished | None, exited: LogHit | None) -> Diagnosis | None:
    evidence = _with_end_state(evidence, finished)
    facts = gather_facts(evidence, report, hits)
    if not facts.failed:
        # exit 0: only the launcher's last round speaks (earlier ones were recovered)
        since = last_restart_seq(rules, hits)
        facts = replace(facts, hits_by_rule=_by_rule(h for h in hits if h.seq > since))
        if finished is None and _crash_at_exit_0(rules, facts):
            if exited is not None:
                return None
            facts = replace(facts, failed=True, crashed_at_exit_0=True)
    choice = choose(rules, facts)
    rule, matched = choice.winner, choice.matched
    decision, hint = rule.decision, rule.hint
    if facts.crashed_at_exit_0:
        hint = (f"Exit 0, but the log shows an error and no sign that the training finished, "
                f"so this is no success: decided on the error. {hint}")
    exhausted = next((r for r in matched if r.exhausts_retries and r is not rule), None)
    escalation = rule.escalate
    rounds = (rounds_with(rules, hits, rule.id) if exhausted is not None and escalation is not None
              else 0)
    if (exhausted is not None and decision is Decision.RETRY and escalation is not None
            and escalation.to is Decision.ABORT and escalation.scope == "job"
            and rounds > escalation.after):
        # the launcher's in-job restarts were the retries this rule asks for ("retry once,
        # then abort"), and the same failure came back in each round: abort, as resched's
        # own retry would after as many occurrences
        decision = Decision.ABORT
        hint = (f"{hint} The launcher restarted the workers and the same failure came back "
                f"in {rounds} rounds: the retries this failure gets were spent in the job, "
                f"so it is aborted.").strip()
    elif exhausted is not None and decision is Decision.RETRY:
        decision = Decision.RESCHEDULE
        hint = f"{hint} {exhausted.hint}".strip()
    status = _status_text(evidence, report)
    diagnosis = Diagnosis(
        rule_id=rule.id, category=rule.category, decision=decision, hint=hint,
        evidence=_evidence_lines(rule, facts, report, status),
        rank_exit_codes=report.rank_exit_codes, root_cause_rank=report.root_cause_rank,
        exclude_node=rule.exclude_node, counts_as_failure=rule.counts_as_failure,
        escalate=rule.escalate, deterministic=rule.deterministic, cascade=rule.cascade,
        status=status, also_matched=tuple(r.id for r in matched if r is not rule and not catch_all(r)),
        matches=choice.ranked, why_won=choice.why,
    )
    # (read only for an abort: both readers of it below doubt an abort, nothing else)
    in_thread = decision is Decision.ABORT and _only_in_threads(rule, facts, rules, hits)
    if finished is not None:
        if facts.failed or facts.hung or decision is not Decision.COMPLETE:
            return _finished_wins(diagnosis, finished, facts, rules, hits, in_thread)
        return _named_finish(diagnosis, finished)
    if exited is not None:
        diagnosis = _named_exit(diagnosis, exited)
    return _settle(diagnosis, rule, matched, facts, in_thread)


def _only_in_threads(rule: Rule, facts: Facts, rules: RuleSet, hits: Sequence[LogHit]) -> bool:
    """Every line of the rule lies in a thread's traceback (success.in_thread_tracebacks):
    a thread died of it, so it says nothing certain of how the process ended."""
    own = facts.hits_by_rule.get(rule.id, ())
    if not own:
        return False
    in_threads = in_thread_tracebacks(rules, hits)
    return all(id(hit) in in_threads for hit in own)


def _normal_exit_for_unknown_status(evidence: Evidence, report: LauncherReport, rules: RuleSet,
                                    hits: Sequence[LogHit], finished: Finished | None) -> LogHit | None:
    """A saved log without its exit status whose process reached a normal interpreter exit
    (a ``marks: exit`` line): it stands for exit 0, and the exit-0 path then decides (an
    error line of a failure rule in it still makes it a failure, as for a launcher that
    hid one). Never when anything else says how the run ended: a known status, resched's
    own flags, a launcher's failure summary, the training's own end (success.py)."""
    if (evidence.exit_code is not None or evidence.signal is not None or evidence.hung
            or evidence.stop_signal is not None or evidence.expect_finished or finished is not None
            or report.root_cause is not None or report.tracker_events):
        return None
    exited = normal_exit(rules, hits)
    if exited is not None and raised_before(rules, hits, exited) is not None:
        return None  # an exception was ending the process: no normal exit
    if exited is not None and _group_stopped_after(hits, exited):
        return None  # one rank left normally, but the launcher then stopped the rest
    return exited


def _group_stopped_after(hits: Sequence[LogHit], line: LogHit) -> bool:
    return any(hit.seq > line.seq and hit.rule_id in GROUP_STOPPED for hit in hits)


def _named_exit(diagnosis: Diagnosis, exited: LogHit) -> Diagnosis:
    """Exit status unknown, a normal exit in the log and no error: decided as an exit 0
    (complete, or a stop when progress names an end not reached); a complete names the line."""
    line = hit_line(exited)
    status = "exit status unknown, a normal exit in the log (read as exit 0)"
    hint = (f"The exit status is unknown, but the process reached its normal exit "
            f"({line.where()}: {line.text[:200]}) and the log shows no error: read as "
            f"exit 0. {diagnosis.hint}")
    evidence = (EvidenceLine(source="status", lineno=0, text=status),) + diagnosis.evidence[1:]
    if diagnosis.decision is not Decision.COMPLETE:
        return replace(diagnosis, status=status, evidence=evidence + (line,), hint=hint)
    return replace(
        diagnosis, rule_id=exited.rule_id, status=status, evidence=evidence[:1] + (line,), hint=hint,
        why_won=f"{exited.rule_id} won: exit status unknown, a normal exit and no error line")


def _named_finish(diagnosis: Diagnosis, finished: Finished) -> Diagnosis:
    """Exit 0 and evidence that the training finished: the decision names that evidence."""
    if finished.rule_id == FLAG_RULE:
        return replace(diagnosis, finished_by=finished.what)
    line = None if finished.hit is None else hit_line(finished.hit)
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


# torchelastic closes the workers still alive when one failed (multiprocessing/api.py
# _close: "Sending process N closing signal SIGTERM"); after a round that succeeded none
# is alive. One rank's exit-time line before it says that rank was leaving, not that the
# others were done: no teardown reading (complete, if wrong, costs a whole run).
GROUP_STOPPED = frozenset({"child-process-failed"})

# A logged ERROR record at exit 0 is a verdict, not teardown noise: a CLI that ran the
# training as its child logs "Command failed (returncode=0, errors detected)" after the
# child's own exit-time lines (ProcessGroupNCCL's warning), and returns 0.
EXIT_0_VERDICT = frozenset({"exit0-error-logged"})


def _verdict_after(rules: RuleSet, hits: Sequence[LogHit], exiting: LogHit) -> bool:
    """An error record of an ``EXIT_0_VERDICT`` rule after the exit line, at error level."""
    categories = {rule.id: rule.category for rule in rules.rules}
    return any(hit.seq > exiting.seq and categories.get(hit.rule_id) in EXIT_0_VERDICT
               and not warning_level(hit.text) for hit in hits)


def _crash_at_exit_0(rules: RuleSet, facts: Facts) -> bool:
    """Exit 0, no evidence that the training finished, and an error line of a failure
    rule (an uncaught traceback, a CUDA OOM...) in the last round: a launcher that hid
    its workers' failure (DeepSpeed's launcher, a shell ``|| true``), no success."""
    trial = replace(facts, failed=True)
    for rule in rules.rules:
        if (rule.marks is not None or catch_all(rule) or rule.decision is Decision.COMPLETE
                or not rule.counts_as_failure or not rule.patterns or rule.exhausts_retries
                or (rule.cascade and not _names_a_crash_at_exit_0(rule))):
            continue
        if rule_matches(rule, trial):
            hit = first_hit(rule, trial)
            if hit is not None and not warning_level(hit.text):
                return True
    return False


def _finished_wins(diagnosis: Diagnosis, finished: Finished, facts: Facts, rules: RuleSet,
                   hits: Sequence[LogHit], in_thread: bool) -> Diagnosis:
    """Evidence that the training finished outranks a failure after it (teardown) and
    the failures of rounds the launcher recovered: complete, naming what won."""
    line = None if finished.hit is None else hit_line(finished.hit)
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
    if (diagnosis.category in OUTPUT_AT_RISK and finished.hit is not None
            and when.endswith("(teardown)")):
        # the final save / an upload runs after the framework's finished line: its failure
        # may have lost the output, so it decides (success.py, OUTPUT_AT_RISK)
        return replace(diagnosis, hint=(
            f"The training loop finished ({finished.what}{at}), but {failure} came after "
            f"it, where the final save or an upload runs: the output may be missing, so "
            f"this is no success. {diagnosis.hint}"),
            why_won=(f"{diagnosis.rule_id} won: a {diagnosis.category} failure after "
                     f"{finished.rule_id} may have lost the final save / upload"))
    if (diagnosis.decision is Decision.ABORT and diagnosis.counts_as_failure and not recovered
            and not in_thread and least_regret([Decision.COMPLETE, Decision.ABORT]) is Decision.ABORT):
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


def _settle(diagnosis: Diagnosis, winner: Rule, matched: Sequence[Rule], facts: Facts,
            in_thread: bool) -> Diagnosis:
    """Abort only on deterministic evidence: when the log also shows a failure a restart
    may fix (a start-up race, the network, a remote service, storage I/O), the cost table
    decides between the readings (wrapper.classifier.costs.least_regret): retry once, and the same
    failure again aborts. So too when the abort's only lines are a thread's traceback: the
    thread died, not the process, and what ended the process is not in the log."""
    if (diagnosis.decision is not Decision.ABORT or _is_user_rule(winner)
            or matched_by_status(winner, facts)):
        return diagnosis  # a user's rule, or exact facts (an exit code, the tracker)
    if in_thread and least_regret([Decision.ABORT, Decision.RETRY]) is Decision.RETRY:
        return replace(
            diagnosis, decision=Decision.RETRY, deterministic=True, exclude_node=False,
            escalate=Escalation(after=1, to=Decision.ABORT, scope="job"),
            hint=(f"{diagnosis.hint} Its lines are a thread's traceback (\"Exception in "
                  f"thread ...\"): the thread died, the process went on, and what ended it "
                  f"is not in the log: retried once; the same failure again aborts."),
            why_won=(f"{diagnosis.rule_id} would abort, but only a thread died of it "
                     f"(threading's excepthook ends no process); least regret: retry "
                     f"(docs/rules.md, Costs)"))
    candidates = [r for r in matched if r.marks is None and not catch_all(r)]
    events = error_events(candidates, facts)  # rule -> the error event its first line is in
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
    hits = without_ignored(rules, hits)  # what Python reported and ignored decides nothing
    return explain_unknown(_diagnose(evidence, rules, report, hits), rules, tails)


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
