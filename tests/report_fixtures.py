"""Hand-built run reports (report.json shape) whose numbers are computed by hand in the tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

T0 = 1_700_000_000.0  # any wall-clock origin: reports store time.time()


class ReportBuilder:
    """Writes a timeline the way the executor would, advancing a clock by hand."""

    def __init__(self, workflow: str = "train", run_id: str = "train-run") -> None:
        self.t = 0.0
        self.events: list[dict[str, Any]] = [{"t": T0, "kind": "run_started", "task": None}]
        self.attempts: list[dict[str, Any]] = []
        self.workflow, self.run_id = workflow, run_id

    def at(self, t: float, kind: str, task: str | None = "master", **fields: Any) -> None:
        self.t = t
        self.events.append({"t": T0 + t, "kind": kind, "task": task, **fields})

    def steps(self, first: int, last: int, step_s: float, save_every: int = 0, save_s: float = 0.0,
              attempt: int = 1) -> None:
        for step in range(first, last + 1):
            self.at(self.t + step_s, "step", step=step, attempt=attempt)
            if save_every and step % save_every == 0:
                self.at(self.t, "checkpoint_saved", step=step, save_s=save_s, attempt=attempt)
                self.t += save_s

    def attempt(self, start: float, end: float, *, attempt: int = 1, retry_id: int = 0, exit_code: int = 0,
                status: str = "COMPLETED", action: str = "COMPLETE", task: str = "master",
                wrapper: dict[str, Any] | None = None) -> None:
        self.attempts.append({"task": task, "attempt": attempt, "retry_id": retry_id,
                              "started_at": T0 + start, "ended_at": T0 + end, "exit_code": exit_code,
                              "action": action, "status": status, "wrapper": wrapper,
                              "resumed_from_step": None, "checkpoints_uploaded": []})

    def report(self, status: str = "COMPLETED") -> dict[str, Any]:
        return {"run_id": self.run_id, "workflow": self.workflow, "status": status, "reason": "",
                "started_at": T0, "ended_at": T0 + self.t, "attempts": self.attempts,
                "events": self.events, "workdir": "/nowhere"}

    def write(self, directory: Path, status: str = "COMPLETED") -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "report.json").write_text(json.dumps(self.report(status)))
        return directory


def one_fault_run() -> ReportBuilder:
    """12 steps of 1 s, a 0.25 s save every 4 steps, killed 0.1 s into step 11, restored at 8.

    By hand: start-up 1.0 (first step line at 2.0 minus its own 1 s), saves 0.5 (steps 4, 8),
    detection 0.5 (11.6 -> 12.1), restart 2.0 (12.1 -> computing again at 14.1), lost work
    2.0 (steps 9, 10 again), useful 12.0, other 0.1 (the torn step 11); wall 18.1.
    """
    run = ReportBuilder()
    run.at(1.0, "task_started", attempt=1)
    run.steps(1, 10, 1.0, save_every=4, save_s=0.25)  # step 10 ends at 11.5
    run.at(11.6, "fault_injected", spec="kill:master@11s", fault="kill", attempt=1)
    run.at(12.1, "wrapper_failure_detected", signal=9, attempt=1)
    run.at(12.2, "wrapper_decision", decision="retry", rule="killed-by-signal", attempt=1)
    run.at(12.5, "wrapper_attempt_started", w_attempt=2, attempt=1)
    run.at(14.1, "wrapper_checkpoint_restored", step=8, attempt=1)
    run.at(14.1, "training_resumed", step=8, attempt=1)
    run.steps(9, 12, 1.0)  # step 9 ends at 15.1, step 12 at 18.1
    run.at(18.1, "checkpoint_uploaded", step=12, seconds=0.02, final=True)
    run.at(18.1, "run_ended", task=None, status="COMPLETED")
    run.attempt(1.0, 18.1, wrapper={"decision": "complete"})
    return run


def fault_free_run() -> ReportBuilder:
    """The same 12 steps without a fault: 1 + 12 + 3 x 0.25 = 13.75 s."""
    run = ReportBuilder(run_id="train-clean")
    run.at(1.0, "task_started", attempt=1)
    run.steps(1, 12, 1.0, save_every=4, save_s=0.25)
    run.at(run.t, "run_ended", task=None, status="COMPLETED")
    run.attempt(1.0, run.t)
    return run
