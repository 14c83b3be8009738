"""``resched wrap``: the attempt loop.

restore checkpoint (when the wrapper owns the store) -> start the command -> watch
(exit, stop signals, heartbeat / output progress, log lines) -> outcome record ->
classify -> policy -> retry in place after a backoff, or leave with the reschedule /
abort code, after a final checkpoint publish. Exit codes: 0 complete, the reschedule
code, the abort code, 70 for a bug in the wrapper (never 0).
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from wrapper import node_guard
from wrapper.attempt import AttemptRunner
from wrapper.config import (
    ALLOCATION_ENV,
    HEARTBEAT_FILE_ENV,
    INTERNAL_ERROR_EXIT,
    OUTCOME_FILE_ENV,
    WrapConfig,
)
from wrapper.decision import Decision
from wrapper.errors import ReschedError
from wrapper.judge import Judge, RuleJudge
from wrapper.outcome import (
    OutcomeRecord,
    attempt_record_path,
    emit_event,
    say,
    write_json_atomic,
)
from wrapper.pathcheck import check_path_kind
from wrapper.state_dir import StateClaim, StateDirBusy, claim_state_dir, default_state_dir
from wrapper.supervise import SignalRelay
from wrapper.wrap_checkpoint import CheckpointSession


class WrapConfigError(ReschedError):
    """A wrap option that cannot work (bad exit codes, no command)."""



def validate_config(config: WrapConfig) -> None:
    if not config.command:
        raise WrapConfigError("no command to run", where="resched wrap",
                              fix="put the command after --, e.g. resched wrap -- torchrun ...")
    for name, code in (("--reschedule-code", config.reschedule_code),
                       ("--abort-code", config.abort_code)):
        if not 1 <= code <= 255:
            raise WrapConfigError(f"{name} {code} is not in 1..255", where=name,
                                  fix="use an exit code between 1 and 255 (0 means complete)")
    if config.reschedule_code == config.abort_code:
        raise WrapConfigError(
            f"--reschedule-code and --abort-code are both {config.abort_code}",
            where="--reschedule-code/--abort-code",
            fix="give them different values (defaults: reschedule 3, abort 1)",
        )
    if config.reschedule_code == INTERNAL_ERROR_EXIT or config.abort_code == INTERNAL_ERROR_EXIT:
        say(f"warning: exit code {INTERNAL_ERROR_EXIT} is also what a wrapper bug exits with")
    if config.checkpoint_url and config.checkpoint_dir is None:
        raise WrapConfigError("--checkpoint-url needs --checkpoint-dir", where="--checkpoint-url",
                              fix="name the local directory the training writes checkpoints to")
    if config.sync_every_s is not None and config.sync_every_s <= 0:
        raise WrapConfigError("--sync-every must be positive", where="--sync-every",
                              fix="give a period such as 10m or PT10M")
    if config.max_retries < 0 or config.max_reschedules < 0:
        raise WrapConfigError("budgets cannot be negative", where="--max-retries/--max-reschedules",
                              fix="give 0 or more")
    for flag, path, want in (("--checkpoint-dir", config.checkpoint_dir, "dir"),
                             ("--state-dir", config.state_dir, "dir"),
                             ("--heartbeat-file", config.heartbeat_file, "file"),
                             ("--outcome-file", config.outcome_file, "file")):
        if path is not None:
            check_path_kind(path, want, flag)


def run_wrap(
    config: WrapConfig,
    *,
    judge: Judge | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], bool] | None = None,
) -> int:
    """Run the attempt loop; return the wrapper's exit code.

    ``sleep(seconds)`` waits the retry backoff and returns True when a stop signal cut it
    short (default: wait on the signal relay). ``judge`` defaults to the real rules.
    """
    validate_config(config)
    relay = SignalRelay(config.stop_signal, broadcast=config.stop_broadcast)
    relay.install()
    loop = _AttemptLoop(config, relay, dict(os.environ if environ is None else environ),
                        clock, sleep or relay.wait)
    try:
        return loop.run(judge)
    except ReschedError:
        loop.checkpoint.finish()
        raise
    except Exception as error:  # noqa: BLE001 - a wrapper bug; supervise already swept the group
        say(f"internal error: {type(error).__name__}: {error}; exiting {INTERNAL_ERROR_EXIT}")
        traceback.print_exc(file=sys.stderr)
        loop.checkpoint.finish()
        loop.write_final(None, INTERNAL_ERROR_EXIT, decision=Decision.ABORT,
                         reason=f"wrapper bug: {error}")
        return INTERNAL_ERROR_EXIT
    finally:
        relay.uninstall()
        loop.cleanup()


class _AttemptLoop:
    def __init__(self, config: WrapConfig, relay: SignalRelay, environ: dict[str, str],
                 clock: Callable[[], float], sleep: Callable[[float], bool]) -> None:
        self.config = config
        self.relay = relay
        self.environ = environ
        self.clock = clock
        self.sleep = sleep
        self.checkpoint = CheckpointSession(
            config.checkpoint_url, config.checkpoint_dir, config.sync_every_s)
        self._own_heartbeat_dir: Path | None = None
        self.state: StateClaim | None = None

    def run(self, judge: Judge | None) -> int:
        config = self.config
        judge = judge or RuleJudge(  # loads the rules first: a bad rules file fails fast
            rule_files=config.rule_files, state_dir=config.state_dir,
            max_retries=config.max_retries, max_reschedules=config.max_reschedules,
            reset_on_progress=config.reset_on_progress, backoff=config.backoff,
        )
        try:
            # Before the state dir exists (restore wants an empty dir), but after the
            # directory's own lock (taken first thing in restore(), kept outside it).
            self.checkpoint.restore()
        except OSError as error:  # a read-only or full target: the user's to fix, not exit 70
            if error.errno not in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC,
                                   errno.EDQUOT, errno.ENOTDIR):
                raise
            raise WrapConfigError(
                f"cannot restore the checkpoint into {config.checkpoint_dir}: "
                f"{error.strerror or error}", where="--checkpoint-dir",
                fix="give a writable --checkpoint-dir") from None
        try:
            config.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # e.g. read-only: user input, never exit 70
            raise WrapConfigError(f"cannot create the state directory {config.state_dir}: "
                                  f"{error.strerror or error}", where="--state-dir",
                                  fix="choose a writable directory with --state-dir") from None
        try:
            self.state = claim_state_dir(config.state_dir, config.node, say)
        except StateDirBusy:
            # another wrapper of this node runs here: its checkpoint dir is not ours to
            # judge, set aside or publish (finish() would do all three)
            self.checkpoint.abandon()
            raise
        if self.state.path != config.state_dir:  # read-only: records go to a private copy
            self.config = config = replace(config, state_dir=self.state.path)
            if isinstance(judge, RuleJudge):
                from wrapper.history import HistoryStore
                judge.store = HistoryStore(self.state.path)
        history = judge.load_history()
        verdict = node_guard.guard(history, config.node)
        if verdict.reason:
            say(verdict.reason)
        if verdict.leave:
            say(f"that history is in {self.state.fallback_from or self.state.path}; delete that "
                "directory or pass another --state-dir if it belongs to another run")
            return self._leave_excluded_node(judge, history, verdict.reason)
        # One completeness verdict before every launch (issue 19): what the framework would
        # wrongly resume from goes aside; before the syncer starts, and after each attempt
        # before its checkpoint is published, so no upload races the moves.
        notes = self.checkpoint.prepare_launch(len(history.attempts) + 1)
        self.checkpoint.start_sync()
        runner = AttemptRunner(config, judge, self.relay, self.environ, self.clock,
                               self._heartbeat_file())
        retries_used = 0
        while True:
            if self.relay.requested is not None:
                return self._stopped_between_attempts(None)
            runner.launch_notes = notes
            record, history = runner.run_one(history, retries_used)
            if record.decision is not Decision.RETRY:
                return self._leave(record)
            retries_used += 1 + record.in_job_restarts
            notes = self.checkpoint.prepare_launch(len(history.attempts) + 1)
            step = notes.get("checkpoint_set_aside", {}).get("step_after",
                                                             record.checkpoint_step_after)
            # The checkpoint this attempt left goes to the store while the next starts.
            self.checkpoint.publish_behind(step, attempt=record.attempt)
            if self.sleep(record.backoff_s):
                return self._stopped_between_attempts(record)

    def _heartbeat_file(self) -> Path:
        if self.config.heartbeat_file is not None:
            return self.config.heartbeat_file.absolute()  # the command may change directory
        # Outside the checkpoint dir on purpose: a file touched every step would make
        # every periodic sync upload it again.
        self._own_heartbeat_dir = Path(tempfile.mkdtemp(prefix="resched-heartbeat-"))
        return self._own_heartbeat_dir / "heartbeat"

    def _leave(self, record: OutcomeRecord) -> int:
        code = self.config.exit_code_for(record.decision)
        self.checkpoint.finish()
        self.write_final(record, code)
        return code

    def _leave_excluded_node(self, judge: Judge, history: Any, reason: str) -> int:
        """One attempt that never started the training: recorded like any other (the
        orchestrator's retry count moves on), then the reschedule code."""
        config, now = self.config, time.time()
        attempt = len(history.attempts) + 1
        record = OutcomeRecord(
            attempt=attempt, allocation=config.allocation, node=config.node, started_at=now,
            ended_at=now, wall_s=0.0, exit_code=None, signal=None, rank_exit_codes={},
            root_cause_rank=None, rule=node_guard.GUARD_RULE, category=node_guard.GUARD_CATEGORY,
            evidence=(), hint="", decision=Decision.RESCHEDULE, reason=reason,
            exclude_node=False, counts_as_failure=False, retries_left=config.max_retries,
            reschedules_left=config.max_reschedules, backoff_s=0.0,
            checkpoint_step_before=None, checkpoint_step_after=None, hung=False,
            stop_signal=None, launcher=None, in_job_restarts=0, launch_error=None,
            hang_timeout_s=None, calibrated_hang_timeout=None, command=config.command,
            artifacts_dir="")
        write_json_atomic(attempt_record_path(config.state_dir, attempt, config.node),
                          record.to_dict())
        judge.record(record)
        emit_event("decision", {"decision": Decision.RESCHEDULE, "rule": node_guard.GUARD_RULE,
                                "reason": reason})
        return self._leave(record)

    def _stopped_between_attempts(self, last: OutcomeRecord | None) -> int:
        """A stop signal outside an attempt (restore, backoff): leave as a preemption."""
        signal_name = self.relay.requested
        say(f"got {signal_name} between attempts -> reschedule (preemption, not a failure)")
        reason = f"stopped by {signal_name} between attempts"
        emit_event("decision", {"decision": Decision.RESCHEDULE, "reason": reason})
        code = self.config.exit_code_for(Decision.RESCHEDULE)
        self.checkpoint.finish()
        if last is None:
            self.write_final(None, code, decision=Decision.RESCHEDULE, reason=reason,
                             stop_signal=signal_name)
        else:
            self.write_final(replace(last, decision=Decision.RESCHEDULE, reason=reason,
                                     stop_signal=signal_name), code)
        return code

    def write_final(self, record: OutcomeRecord | None, exit_code: int, *,
                    decision: Decision | None = None, reason: str = "",
                    stop_signal: str | None = None) -> None:
        """The final outcome file: the last attempt's record, or (when no attempt ran to
        its end) just the decision, its reason and the exit code."""
        path = self.config.outcome_file
        if path is None:
            return
        if record is not None:
            final = record.to_dict()
        else:
            final = {"decision": str(decision or Decision.ABORT), "reason": reason}
            if stop_signal is not None:
                final["stop_signal"] = stop_signal
        final["wrapper_exit_code"] = exit_code
        try:
            write_json_atomic(path, final)
        except OSError as error:
            say(f"could not write the outcome file {path}: {error}")

    def cleanup(self) -> None:
        if self.state is not None:
            self.state.release()
        self.checkpoint.release()
        if self._own_heartbeat_dir is not None:
            shutil.rmtree(self._own_heartbeat_dir, ignore_errors=True)


def default_allocation(node: str, environ: Mapping[str, str]) -> str:
    """One wrapper run = one allocation; ``RESCHED_ALLOCATION`` names it explicitly."""
    if environ.get(ALLOCATION_ENV):
        return environ[ALLOCATION_ENV]
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{node}-{stamp}-{os.getpid()}"


__all__ = ["HEARTBEAT_FILE_ENV", "INTERNAL_ERROR_EXIT", "OUTCOME_FILE_ENV", "WrapConfig", "WrapConfigError", "default_state_dir", "run_wrap", "validate_config"]
