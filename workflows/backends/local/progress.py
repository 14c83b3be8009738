"""Live progress: one line per task redrawn on a terminal, plain event lines otherwise.

Both modes print the same event lines (task ended with its action, the wrapper's
decisions, chaos faults, restarts); a terminal additionally shows a live block at the
bottom: task, state, attempt, last step, last checkpoint step.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from workflows.backends.local.timeline import Event
from wrapper.safe_output import write_control

_REDRAW_S = 0.5


@dataclass(frozen=True)
class TaskRow:
    name: str
    status: str
    attempt: int
    retry_id: int


class Progress:
    def __init__(self, mode: str = "auto", stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "tty" if self.stream.isatty() else "plain"
        self.mode = mode
        self._lock = threading.Lock()
        self._block_lines = 0
        self._last_draw = 0.0
        self._rows: list[TaskRow] = []
        self._step: dict[str, int] = {}
        self._ckpt: dict[str, int] = {}
        self._upload_failing: set[str] = set()

    # -- events ---------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        task, fields = event.task or "", event.fields
        if event.kind == "step":
            self._step[task] = int(fields["step"])
        elif event.kind == "checkpoint_uploaded":
            self._upload_failing.discard(task)
            if fields.get("step") is not None:
                self._ckpt[task] = int(fields["step"])
        elif event.kind == "checkpoint_upload_failed" and task not in self._upload_failing:
            self._upload_failing.add(task)  # said once until an upload succeeds again
            self.line(f"{task}  UPLOAD   checkpoint upload failed (5 tries; will try again "
                      f"next period): {fields.get('error')}")
        elif event.kind == "wrapper_decision":
            rule = fields.get("rule") or fields.get("rule_id")
            self.line(f"{task}  WRAPPER  {fields.get('decision', '?')}"
                      + (f" (rule: {rule})" if rule else "")
                      + (f": {fields['reason']}" if fields.get("reason") else ""))
        elif event.kind == "wrapper_failure_detected":
            self.line(f"{task}  FAILED   in place: {_how_it_ended(fields)}")

    def task_output(self, task: str, line: str) -> None:
        """Task output goes to its log file; nothing is echoed here."""

    def task_ended(self, record: dict[str, Any], reason: str) -> None:
        wrapper = record.get("wrapper") or {}
        said = ""
        if wrapper:
            said = f" -> wrapper: {wrapper.get('decision')}"
            if wrapper.get("rule"):
                said += f" (rule: {wrapper['rule']})"
        forced = " (forced by chaos)" if record.get("forced_exit_code") else ""
        self.line(f"{record['task']}  {record['status']:<8} attempt {record['attempt']} "
                  f"exit {record['exit_code']}{forced}{said} -> {record['action']}: {reason}")

    # -- output -----------------------------------------------------------------------
    def line(self, text: str) -> None:
        if self.mode == "quiet":
            return
        with self._lock:
            self._erase()
            self.stream.write(text + "\n")
            self._draw()
            self.stream.flush()

    def refresh(self, rows: list[TaskRow]) -> None:
        with self._lock:
            self._rows = rows
        if self.mode != "tty" or time.monotonic() - self._last_draw < _REDRAW_S:
            return
        with self._lock:
            self._erase()
            self._draw()
            self.stream.flush()

    def close(self) -> None:
        """Remove the live block for good: what follows (the report) is plain lines."""
        with self._lock:
            self._erase()
            self._rows = []
            self.stream.flush()

    def _erase(self) -> None:
        if self.mode == "tty" and self._block_lines:
            write_control(self.stream, f"\x1b[{self._block_lines}F\x1b[J")
            self._block_lines = 0

    def _draw(self) -> None:
        if self.mode != "tty":
            return
        for row in self._rows:
            step = self._step.get(row.name)
            ckpt = self._ckpt.get(row.name)
            self.stream.write(
                f"{row.name:<12} {row.status:<10} attempt {row.attempt}  pod {row.retry_id}"
                + (f"  step {step}" if step is not None else "")
                + (f"  ckpt {ckpt}" if ckpt is not None else "")
                + "\n"
            )
        self._block_lines = len(self._rows)
        self._last_draw = time.monotonic()


def _how_it_ended(fields: dict[str, Any]) -> str:
    """The wrapper's failure event in words: "hung", "signal 15", "exit 3"."""
    parts = []
    if fields.get("hung"):
        parts.append("hung")
    if fields.get("signal") is not None:
        parts.append(f"signal {fields['signal']}")
    elif fields.get("exit_code") is not None:
        parts.append(f"exit {fields['exit_code']}")
    return ", ".join(parts) or "ended"
