"""Evidence that the training finished, and which errors it outranks.

A training that reached its end is complete whatever happens after (a crash, hang or
collective timeout in teardown) and whatever an earlier round of the launcher did
(ft_launcher / torchrun restarted the workers, the next round finished). The evidence,
strongest first:

1. the finished-flag file (``--expect-finished-flag``; NeMo / NVRx write it at the end);
   when it was expected and is missing, the training did NOT finish, whatever else says so;
2. a line of a catalogue rule with ``marks: success``: the framework's own "finished"
   line (HF Trainer, Lightning's max_steps / max_epochs stop, Megatron's "after training
   is done") or the launcher's success verdict (torchelastic / ft_launcher worker group
   SUCCEEDED);
3. progress: Megatron's ``iteration N/ TOTAL`` line with N = TOTAL (--train-iters).

A finished line ends only its own run (``still_the_end``): not when a training loop starts
or goes on after it (a script's second ``trainer.train()``, YOLOv5's next --evolve
generation, Lightning refusing an early stop before ``min_epochs``: ``marks: start``), nor
when a stop was asked for before it in the same run (a preemption's checkpoint-and-exit, a
time budget, a user's stop button: the HF Trainer prints its usual end lines when a
callback stopped it; ``marks: stop``).

A storage or remote-service failure after a finished LINE (not the flag, which is
written last) is the exception: the final save or an upload runs after those lines
(``OUTPUT_AT_RISK``), so the failure decides.

The reverse also holds: a progress line that names an end the training did not reach
says an exit 0 was a stop, not the end (``unfinished``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wrapper.classifier.blocks import inside_blocks
from wrapper.classifier.line_prefix import warning_level
from wrapper.classifier.rules import RuleSet
from wrapper.classifier.scanner import LogHit
from wrapper.decision import Decision


@dataclass(frozen=True)
class Finished:
    """What says the training finished: ``what`` names it, ``hit`` is its line."""

    rule_id: str  # the success rule, "complete-finished" for the flag, "last-step-reached"
    what: str
    hit: LogHit | None = None


# Failure categories that may mean the training's output was not written: the frameworks'
# end-of-training lines come BEFORE their final save (Megatron saves after "[after training
# is done]", HF's save_model runs after Trainer.train() returned) and before any upload.
# Such a failure after the line is no teardown noise: the run keeps the failure's decision
# (retry: 1 wasted restart if the output was there, against 100 for a "complete" without it).
OUTPUT_AT_RISK = frozenset({"storage-io", "remote-service"})

FLAG_RULE = "complete-finished"
LAST_STEP_RULE = "last-step-reached"


def find_finished(rules: RuleSet, hits: Sequence[LogHit], *, expect_finished: bool,
                  finished: bool, last_step: int | None,
                  total_steps: int | None) -> Finished | None:
    """The strongest evidence that the training finished, or None."""
    if expect_finished:
        return Finished(FLAG_RULE, "the finished-flag file exists") if finished else None
    success_ids = marked(rules, "success")
    start_ids, stop_ids = marked(rules, "start"), marked(rules, "stop")
    starts = [hit.seq for hit in hits if hit.rule_id in start_ids]
    stops = [hit.seq for hit in hits if hit.rule_id in stop_ids]
    lines = [hit for hit in hits if hit.rule_id in success_ids and still_the_end(hit.seq, starts, stops)]
    if lines:
        # the last round's verdict; on one line, the more specific rule (the earlier in
        # the catalogue: a framework's own line before the generic script line) names it
        order = {rule.id: i for i, rule in enumerate(rules.rules)}
        last = max(lines, key=lambda h: h.seq)
        hit = min((h for h in lines if (h.stream, h.lineno) == (last.stream, last.lineno)),
                  key=lambda h: order[h.rule_id])
        rule = rules.by_id(hit.rule_id)
        what = rule.hint.rstrip(".") if rule is not None and rule.hint else "an end-of-training line"
        return Finished(hit.rule_id, what[:1].lower() + what[1:], hit)
    if reached_last_step(last_step, total_steps):
        return Finished(LAST_STEP_RULE, f"its last step was reached (iteration {last_step}/"
                                        f"{total_steps})")
    return None


def still_the_end(seq: int, starts: Sequence[int], stops: Sequence[int]) -> bool:
    """Whether a finished line at ``seq`` still ends the run: no training loop started (or
    went on) after it, and no stop was asked for in its own run before it (frameworks print
    their usual end lines when a stop request ended the loop early; a start between the
    stop and the line means a new run, which then finished)."""
    if any(start > seq for start in starts):
        return False
    began = max((start for start in starts if start < seq), default=-1)
    return not any(began < stop < seq for stop in stops)


def reached_last_step(last_step: int | None, total_steps: int | None) -> bool:
    return last_step is not None and total_steps is not None and 0 < total_steps <= last_step


def stopped_short(last_step: int | None, total_steps: int | None) -> bool:
    """Progress names an end that was not reached."""
    return last_step is not None and total_steps is not None and last_step < total_steps


def marked(rules: RuleSet, mark: str) -> frozenset[str]:
    """The ids of the rules whose lines mark this event (``marks: <mark>``)."""
    return frozenset(rule.id for rule in rules.rules if rule.marks == mark)


def in_thread_tracebacks(rules: RuleSet, hits: Sequence[LogHit]) -> set[int]:
    """The ``id()`` of every hit inside a thread's traceback (``Exception in thread NAME:``
    to its exception line): a thread died of it, the process went on (threading's
    excepthook ends no process)."""
    return inside_blocks(hits, marked(rules, "thread"))


def exit_lines(rules: RuleSet, hits: Sequence[LogHit]) -> list[LogHit]:
    """The lines that say the process was on its way out: those of a ``marks: exit`` rule
    (printed only at interpreter exit), and an experiment tracker's end-of-run footer
    (``marks: tracker``) that no failure line follows. The footer comes from the tracker's
    exit hook, after a crash's traceback, or from the script closing its run itself, which
    can happen anywhere (YOLOX's trainer in a ``finally``, Megatron on its SIGTERM exit): a
    failure after it means the process went on, and that failure decides."""
    exit_ids, tracker_ids = marked(rules, "exit"), marked(rules, "tracker")
    failure_ids = _failure_rule_ids(rules)
    in_threads = in_thread_tracebacks(rules, hits)  # a thread died, not the process
    last_failure = max((hit.seq for hit in hits if hit.rule_id in failure_ids
                        and id(hit) not in in_threads and not warning_level(hit.text)), default=-1)
    return [hit for hit in hits
            if hit.rule_id in exit_ids or (hit.rule_id in tracker_ids and hit.seq > last_failure)]


def _failure_rule_ids(rules: RuleSet) -> frozenset[str]:
    """Rules whose line is a failure's: no marks rule, no catch-all, no success."""
    return frozenset(rule.id for rule in rules.rules
                     if rule.marks is None and rule.counts_as_failure and rule.patterns
                     and rule.decision is not Decision.COMPLETE)


def normal_exit(rules: RuleSet, hits: Sequence[LogHit]) -> LogHit | None:
    """The last line that the process prints only on its way out of a normal interpreter
    exit (``exit_lines``), or None. Read only when the exit status is unknown (a saved log
    without it): such a line and no error in the log stand for an exit 0."""
    return max(exit_lines(rules, hits), key=lambda h: h.seq, default=None)


def first_exit_line(rules: RuleSet, hits: Sequence[LogHit]) -> LogHit | None:
    """The first line that the process prints only on its way out (``exit_lines``): from
    there on it was exiting. None when the log has none."""
    return min(exit_lines(rules, hits), key=lambda h: h.seq, default=None)


def last_restart_seq(rules: RuleSet, hits: Sequence[LogHit]) -> int:
    """Where the launcher's last round began (the seq of its last restart line), -1 if
    it never restarted: errors before it belong to rounds the launcher recovered."""
    restart_ids = marked(rules, "restart")
    return max((hit.seq for hit in hits if hit.rule_id in restart_ids), default=-1)


def rounds_with(rules: RuleSet, hits: Sequence[LogHit], rule_id: str) -> int:
    """In how many of the launcher's rounds (split at its restart lines) the rule's lines
    appear: a failure that came back after every in-job restart."""
    restart_ids = marked(rules, "restart")
    restarts = sorted(hit.seq for hit in hits if hit.rule_id in restart_ids)
    rounds = {sum(1 for seq in restarts if seq < hit.seq) for hit in hits if hit.rule_id == rule_id}
    return len(rounds)


def raised_before(rules: RuleSet, hits: Sequence[LogHit], line: LogHit) -> LogHit | None:
    """The last exception line of a generic class (a ``marks: raised`` rule: RuntimeError,
    Exception...) before ``line`` and after the launcher's last restart, or None. A
    process that printed one was ending by that exception, so an exit-time line after it
    is no normal exit (PyTorch's ProcessGroupNCCL warning is printed at any exit)."""
    raised_ids = marked(rules, "raised")
    since = last_restart_seq(rules, hits)
    return max((hit for hit in hits if hit.rule_id in raised_ids and since < hit.seq < line.seq),
               key=lambda h: h.seq, default=None)
