"""One attempt: run the command, gather the evidence, classify, decide, record.

Everything an attempt leaves behind lives under
``<state_dir>/attempts/attempt-NNNN.<node>{.json,/}``: the outcome record, the tails of
both streams, the torchelastic error files of the launcher's ranks. The record goes
into the history before the decision is acted on.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from wrapper.config import ATTEMPT_ENV, HEARTBEAT_FILE_ENV, NODE_ENV, STATE_DIR_ENV, WrapConfig
from wrapper.decision import Decision
from wrapper.ft_state import restore_ft_state, save_ft_state
from wrapper.hang import HangSettings
from wrapper.judge import Judge
from wrapper.launchers import (
    detect_launcher,
    find_error_files,
    launcher_env,
    tracker_file,
)
from wrapper.classifier.nvrx_verdict import NvrxFindings
from wrapper.classifier.nvrx_watch import STRAGGLER_REPORT_ENV
from wrapper.classifier.output_watch import OutputWatch
from wrapper.redact import redact
from wrapper.outcome import (
    OutcomeRecord,
    attempt_artifacts_dir,
    attempt_record_path,
    describe_decision,
    describe_ending,
    emit_event,
    say,
    write_json_atomic,
)
from wrapper.stop_outcome import StepTracker, judge_stop
from wrapper.teardown import FinishWatch
from wrapper.supervise import SignalRelay, SupervisedRun, SuperviseOptions, Supervisor


class AttemptRunner:
    def __init__(self, config: WrapConfig, judge: Judge, relay: SignalRelay,
                 environ: Mapping[str, str], clock: Callable[[], float],
                 heartbeat_file: Path) -> None:
        self.config = config
        self.judge = judge
        self.relay = relay
        self.environ = environ
        self.clock = clock
        self.heartbeat_file = heartbeat_file
        self.launcher = detect_launcher(config.command)
        self.tracker_file = tracker_file(config.command)
        # what the loop did to the checkpoint directory before this launch (torn saves
        # moved aside): goes into the attempt's record as it is
        self.launch_notes: Mapping[str, Any] = {}

    def run_one(self, history: Any, retries_used: int) -> tuple[OutcomeRecord, Any]:
        """Run attempt number ``len(history.attempts) + 1``; return (record, new history)."""
        config = self.config
        attempt = len(history.attempts) + 1
        artifacts = attempt_artifacts_dir(config.state_dir, attempt, config.node)
        artifacts.mkdir(parents=True, exist_ok=True)
        step_before = self._checkpoint_step()
        if config.ft_state is not None and (line := restore_ft_state(config.ft_state,
                                                                      config.state_dir)):
            say(line)
        hang = self._hang_settings(history)
        emit_event("attempt_started", {
            "attempt": attempt, "node": config.node, "allocation": config.allocation,
            "checkpoint_step": step_before, "command": list(config.command),
        })
        env = self._attempt_env(attempt, artifacts)  # a fresh heartbeat file first
        feed = _ScanFeed(self.judge.new_scanner(), self.heartbeat_file)
        flag = config.expect_finished_flag
        feed.finish = FinishWatch(clock=self.clock, last_step=lambda: feed.steps.last_step,
                                  flag=flag.absolute() if flag is not None else None)
        supervisor = Supervisor(
            config.command, env=env,
            options=SuperviseOptions(grace_s=config.grace_s, hang_grace_s=config.hang_grace_s,
                                     hang=hang, teardown_timeout_s=config.teardown_timeout_s,
                                     heartbeat_file=self.heartbeat_file, poll_s=config.poll_s),
            feed_text=feed, relay=self.relay, clock=self.clock,
            on_hang=lambda silent, timeout: emit_event("failure_detected", {
                "attempt": attempt, "kind": "hang", "silent_s": round(silent, 3),
                "timeout_s": timeout}),
            finished=feed.finish.finished,
        )
        run = supervisor.run()
        if run.teardown is not None:
            say(f"the training said it finished ({run.teardown!r}) but its processes had not "
                f"exited {run.teardown_s:.0f} s later (--teardown-timeout): ended them; "
                "counted complete")
        feed.heartbeat_file = None  # the attempt is over: no more touches
        self._report_failure(attempt, run)
        _save_tails(artifacts, run)
        evidence = self._evidence(run, artifacts, feed)
        if run.teardown is not None:
            # Ended by the wrapper after the training said it was done: the signal it
            # died of is the wrapper's, not a failure (the record keeps the evidence).
            evidence = {**evidence, "exit_code": 0, "signal": None, "hung": False,
                        "expect_finished": True, "finished": True}
        if evidence["exit_code"] == 0 and feed.nvrx.launcher_unhealthy:
            say("note: the launcher exited 0 but reported its workers UNHEALTHY: a failure")
        # One judge (wrapper.classifier.verdict.judge): the same code `resched classify` decides with
        diagnosis = self.judge.classify(evidence)
        nvrx = getattr(diagnosis, "nvrx", None) or NvrxFindings.of(feed.nvrx)
        step_after = self._checkpoint_step()
        ft_timeouts = (save_ft_state(config.ft_state, config.state_dir)
                       if config.ft_state is not None else None)
        decision = self.judge.decide(
            diagnosis, history, node=config.node, allocation=config.allocation,
            step=step_after, retries_used_in_allocation=retries_used + feed.in_job_restarts)
        detector = supervisor.hang_detector
        record = self._record(
            attempt=attempt, run=run, diagnosis=diagnosis, decision=decision,
            steps=(step_before, step_after), restarts=feed.in_job_restarts, artifacts=artifacts,
            hang_timeout=detector.timeout_s() if detector else None,
            calibrated=detector.calibrated_timeout_s() if detector else hang.calibrated_s,
            evidence=evidence, last_step=feed.steps.last_step, nvrx=nvrx,
            ft_timeouts=ft_timeouts,
        )
        write_json_atomic(attempt_record_path(config.state_dir, attempt, config.node),
                          record.to_dict())
        history = self.judge.record(record)
        self._announce(record, rule_decision=Decision.parse(diagnosis.decision))
        return record, history

    def _announce(self, record: OutcomeRecord, *, rule_decision: Decision) -> None:
        """The two human lines and the timeline event of a decision."""
        say(describe_ending(record))
        say(describe_decision(record, rule_decision=rule_decision,
                              max_retries=self.config.max_retries,
                              max_reschedules=self.config.max_reschedules))
        emit_event("decision", {
            "attempt": record.attempt, "decision": record.decision, "rule": record.rule,
            "category": record.category, "reason": record.reason,
            "exclude_node": record.exclude_node, "backoff_s": record.backoff_s,
            "retries_left": record.retries_left, "reschedules_left": record.reschedules_left,
        })

    def _checkpoint_step(self) -> int | None:
        if self.config.checkpoint_dir is None:
            return None
        # The marker's step, else the one the framework's own files name (Megatron's
        # tracker, HF's checkpoint-N, Lightning's step=N...): progress for real trainings.
        from wrapper.checkpoint.snapshot import checkpoint_step

        return checkpoint_step(self.config.checkpoint_dir)

    def _hang_settings(self, history: Any) -> HangSettings:
        hang = self.config.hang
        carried = getattr(history, "calibrated_hang_timeout", None)
        if hang.auto and carried is not None and hang.calibrated_s is None:
            return replace(hang, calibrated_s=float(carried))
        return hang

    def _attempt_env(self, attempt: int, artifacts: Path) -> dict[str, str]:
        # A fresh heartbeat file per attempt: only touches made by this attempt count.
        self.heartbeat_file.parent.mkdir(parents=True, exist_ok=True)
        self.heartbeat_file.write_bytes(b"")
        env = launcher_env(self.environ, self.launcher, artifacts)
        env[HEARTBEAT_FILE_ENV] = str(self.heartbeat_file)
        env[ATTEMPT_ENV] = str(attempt)
        env[NODE_ENV] = self.config.node
        env[STATE_DIR_ENV] = str(self.config.state_dir)
        env[STRAGGLER_REPORT_ENV] = str((artifacts / "straggler.json").absolute())
        flag = self.config.expect_finished_flag
        if flag is not None:  # NVRx / NeMo write their finished flag where this names
            env.setdefault("FAULT_TOL_FINISHED_FLAG_FILE", str(flag.absolute()))
        return env

    def _report_failure(self, attempt: int, run: SupervisedRun) -> None:
        if run.unscanned_lines is None:
            say(f"note: {run.unscanned_bytes} bytes of output came faster than the log scanner "
                "and were forwarded unscanned (the end of each burst was scanned; line "
                "numbers after them count from a byte offset)")
        elif run.unscanned_lines:
            say(f"note: {run.unscanned_lines} lines came faster than the log scanner and were "
                "forwarded unscanned (the end of each burst was scanned)")
        if run.hung or (run.exit_code == 0 and run.signal is None) or run.teardown is not None:
            # a hang was reported when it was detected; exit 0 is no failure; nor is a
            # finished training whose teardown hung (the wrapper ended it)
            return
        emit_event("failure_detected", {
            "attempt": attempt, "kind": "exit", "exit_code": run.exit_code,
            "signal": run.signal, "stop_signal": run.stop_signal,
            "launch_error": run.launch_error, "ended_at": run.ended_at,
            # where detection time goes: the exit seen, then the rest of the task reaped
            "exit_seen_at": run.exit_seen_at, "sweep_s": run.sweep_s,
            "leftovers": run.leftover_processes_killed,
        })
        if run.launch_error:
            say(f"error: {run.launch_error} (check the command after --, its PATH and "
                "its execute permission)")

    def _evidence(self, run: SupervisedRun, artifacts: Path, feed: OutputWatch) -> dict[str, Any]:
        flag = self.config.expect_finished_flag
        return {
            "exit_code": run.exit_code,
            "signal": run.signal,
            "hits": tuple(feed.scanner.hits),
            "error_files": find_error_files(artifacts, self.config.command,
                                            self.environ, since=run.started_at),
            "launcher_summary_lines": run.stderr_tail + run.stdout_tail,
            "tracker_file": self.tracker_file,
            "hung": run.hung,
            "stop_signal": run.stop_signal,
            "expect_finished": flag is not None,
            "finished": flag is not None and flag.exists(),
            "launcher": self.launcher,
            "last_step": feed.steps.iteration,
            "total_steps": feed.steps.total_steps,
            "nvrx": feed.nvrx,
            "straggler_file": artifacts / "straggler.json",
        }

    def _explain_command(self, run: SupervisedRun, artifacts: Path,
                         evidence: Mapping[str, Any]) -> str:
        """The `resched classify` call that re-derives this diagnosis from the saved tails."""
        argv = ["resched", "classify"]
        if run.exit_code is not None:
            argv += ["--exit-code", str(run.exit_code)]
        if run.signal is not None:
            argv += ["--signal", str(run.signal)]
        for name in ("stdout", "stderr"):
            argv += ["--log", str(artifacts / f"{name}.tail.log")]
        for error_file in evidence["error_files"]:
            argv += ["--error-file", str(error_file)]
        if evidence["tracker_file"] is not None:
            argv += ["--tracker", str(evidence["tracker_file"])]
        for rules in self.config.rule_files:
            argv += ["--rules", str(rules)]
        if run.hung:
            argv.append("--hung")
        if run.stop_signal:
            argv += ["--stop-requested", run.stop_signal]
        if evidence["expect_finished"]:
            argv += ["--expect-finished", "finished" if evidence["finished"] else "unfinished"]
        if self.launcher:
            argv += ["--launcher", self.launcher]
        return shlex.join(argv)

    def _record(self, *, attempt: int, run: SupervisedRun, diagnosis: Any, decision: Any,
                steps: tuple[int | None, int | None], restarts: int, artifacts: Path,
                hang_timeout: float | None, calibrated: float | None,
                evidence: Mapping[str, Any], last_step: int | None = None,
                nvrx: NvrxFindings | None = None,
                ft_timeouts: Mapping[str, Any] | None = None) -> OutcomeRecord:
        action, reason = Decision.parse(decision.action), str(decision.reason)
        if action is Decision.RETRY and run.stop_signal is not None:
            # The wrapper itself is being stopped (preemption, time limit): never restart
            # in place; leave so the orchestrator can run the task again elsewhere.
            action = Decision.RESCHEDULE
            reason = f"{reason}; wrapper got {run.stop_signal}, so no retry in place"
        if run.launch_error and action is not Decision.ABORT:
            action = Decision.ABORT
            reason = f"{run.launch_error}: a user error, retrying cannot help"
        if run.teardown is not None and action is Decision.COMPLETE:
            reason = (f"the training said it finished ({run.teardown!r}) and did not exit "
                      f"within {run.teardown_s:.0f} s: its teardown was ended; {reason}")
        category, stop_extra = diagnosis.category, {}
        if run.stop_signal is not None:
            verdict = judge_stop(step_before=steps[0], step_after=steps[1],
                                 last_step=last_step,
                                 checkpoint_known=self.config.checkpoint_dir is not None)
            stop_extra = {"stop_saved": verdict.saved, "steps_lost": verdict.steps_lost,
                          "stop_summary": verdict.summary}
            if action is Decision.COMPLETE:
                # The training had finished (finished flag, final step) when the stop came,
                # e.g. an orchestrator ending the other tasks once the lead completed:
                # nothing is lost, whatever the checkpoint did.
                stop_extra = {"stop_saved": verdict.saved, "steps_lost": 0,
                              "stop_summary": "stopped after the training had finished"}
            elif verdict.saved is False and action is not Decision.ABORT:
                # Never a clean preemption: the work since the last checkpoint is gone.
                category = "stopped-unsaved"
                reason = f"{verdict.summary}; {reason}"
                say(f"warning: {verdict.summary}: the training did not save on "
                    f"{self.config.stop_signal_name} (see --stop-signal)")
        return OutcomeRecord(
            attempt=attempt, allocation=self.config.allocation, node=self.config.node,
            started_at=run.started_at, ended_at=run.ended_at, wall_s=run.wall_s,
            exit_code=run.exit_code, signal=run.signal,
            rank_exit_codes={str(k): int(v) for k, v in dict(diagnosis.rank_exit_codes).items()},
            root_cause_rank=diagnosis.root_cause_rank, rule=diagnosis.rule_id,
            category=category,
            evidence=tuple(_evidence_line(line) for line in diagnosis.evidence),
            hint=diagnosis.hint, decision=action, reason=reason,
            exclude_node=bool(decision.exclude_node) or (
                nvrx is not None and self.config.node in nvrx.exclude_nodes),
            counts_as_failure=bool(diagnosis.counts_as_failure),
            retries_left=int(decision.retries_left),
            reschedules_left=int(decision.reschedules_left),
            backoff_s=float(decision.backoff_s) if action is Decision.RETRY else 0.0,
            checkpoint_step_before=steps[0], checkpoint_step_after=steps[1], hung=run.hung,
            stop_signal=run.stop_signal, launcher=self.launcher, in_job_restarts=restarts,
            launch_error=run.launch_error, hang_timeout_s=hang_timeout,
            calibrated_hang_timeout=calibrated, command=tuple(self.config.command),
            artifacts_dir=str(artifacts),
            extra={"leftover_processes_killed": run.leftover_processes_killed,
                   "unscanned_lines": run.unscanned_lines,
                   "unscanned_bytes": run.unscanned_bytes,
                   "line_numbers_exact": run.unscanned_lines is not None, **stop_extra,
                   **({"teardown": {"finished_line": run.teardown,
                                    "ended_after_s": run.teardown_s,
                                    "exit_code": run.exit_code, "signal": run.signal}}
                      if run.teardown is not None else {}),
                   "node_replacement": action is Decision.RESCHEDULE
                   and bool(getattr(decision, "node_replacement", False)),
                   **(nvrx.record_fields() if nvrx is not None else {}),
                   **({"nvrx_timeouts": dict(ft_timeouts)} if ft_timeouts else {}),
                   "explain_command": self._explain_command(run, artifacts, evidence),
                   **self.launch_notes},
        )


class _ScanFeed(OutputWatch):
    """The judge's output reader, plus keeping the heartbeat alive during an in-process
    restart (barriers, re-initialising the process group beat no heartbeat; touching the
    file the training touches keeps the hang detector from killing a restart that is
    under way). Only done when the training uses heartbeats (else its output lines,
    these included, are the progress already)."""

    def __init__(self, scanner: Any, heartbeat_file: Path | None = None) -> None:
        super().__init__(scanner)
        self.heartbeat_file = heartbeat_file
        self._heartbeat_mtime = _mtime(heartbeat_file)
        self.finish: FinishWatch | None = None  # did the training say it is done

    def __call__(self, text: str, stream: str) -> None:
        restarting = self.feed_text(text, stream)
        if self.finish is not None:
            self.finish.feed(text)
        if restarting and self.heartbeat_file is not None:
            if _mtime(self.heartbeat_file) != self._heartbeat_mtime:
                self.heartbeat_file.touch()


def _mtime(path: Path | None) -> int | None:
    try:
        return None if path is None else path.stat().st_mtime_ns
    except OSError:
        return None


def _evidence_line(line: Any) -> dict[str, Any]:
    if isinstance(line, Mapping):
        return dict(line)
    after_byte = getattr(line, "after_byte", None)
    position = {} if after_byte is None else {"after_byte": after_byte}
    return {"source": line.source, "lineno": line.lineno, **position, "text": line.text}


def _save_tails(artifacts: Path, run: SupervisedRun) -> None:
    for name, tail in (("stdout", run.stdout_tail), ("stderr", run.stderr_tail)):
        (artifacts / f"{name}.tail.log").write_text(
            "".join(redact(line) + "\n" for line in tail), encoding="utf-8", errors="replace")
