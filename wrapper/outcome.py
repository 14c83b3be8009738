"""One outcome record per attempt, written atomically, and the lines a human reads.

The record is the one artifact everything else reads: the history (appended to it),
the backends (``RESCHED_OUTCOME_FILE`` holds the final one), ``resched classify`` (its
evidence lines can be checked against the saved log tails next to it).
"""

from __future__ import annotations

import json
import os
import re
import signal as signal_module
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from wrapper.config import OUTCOME_FILE_ENV
from wrapper.decision import Decision
from wrapper.redact import redact_data
from wrapper.safe_output import clean

__all__ = ["OUTCOME_FILE_ENV", "OutcomeRecord", "describe_decision", "describe_ending"]


@dataclass(frozen=True)
class OutcomeRecord:
    """What happened in one attempt and what the wrapper decided (the contract's keys)."""

    attempt: int
    allocation: str
    node: str
    started_at: float
    ended_at: float
    wall_s: float
    exit_code: int | None
    signal: int | None
    rank_exit_codes: Mapping[str, int]
    root_cause_rank: int | None
    rule: str
    category: str
    evidence: tuple[Mapping[str, Any], ...]
    hint: str
    decision: Decision
    reason: str
    exclude_node: bool
    counts_as_failure: bool
    retries_left: int
    reschedules_left: int
    backoff_s: float
    checkpoint_step_before: int | None
    checkpoint_step_after: int | None
    hung: bool
    stop_signal: str | None
    launcher: str | None
    in_job_restarts: int
    launch_error: str | None
    hang_timeout_s: float | None
    calibrated_hang_timeout: float | None
    command: tuple[str, ...]
    artifacts_dir: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        extra = data.pop("extra")
        data["evidence"] = [dict(line) for line in self.evidence]
        data["rank_exit_codes"] = {str(k): v for k, v in self.rank_exit_codes.items()}
        data["command"] = list(self.command)
        data["decision"] = str(self.decision)  # the plain word in JSON
        data.update(extra)
        return data


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """tmp file in the same directory + fsync + rename: a reader sees all or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # Round-trip through JSON first so that every string (str() of odd values too)
        # passes the credential filter before it reaches the disk.
        redacted = redact_data(json.loads(json.dumps(data, default=str)))
        with os.fdopen(handle, "w", encoding="utf-8") as tmp:
            json.dump(redacted, tmp, indent=2, sort_keys=True, default=str)
            tmp.write("\n")
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:64] or "node"


def attempt_stem(attempt: int, node: str) -> str:
    """``attempt-0003.node-a``: several nodes sharing one state dir never collide."""
    return f"attempt-{attempt:04d}.{safe_name(node)}"


def attempt_record_path(state_dir: Path, attempt: int, node: str) -> Path:
    return state_dir / "attempts" / f"{attempt_stem(attempt, node)}.json"


def attempt_artifacts_dir(state_dir: Path, attempt: int, node: str) -> Path:
    return state_dir / "attempts" / attempt_stem(attempt, node)


def signal_name(signum: int) -> str:
    try:
        return signal_module.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_ending(record: OutcomeRecord) -> str:
    """``attempt 2 ended: exit 1, rank 1 exit 16 (hidden by torchrun)``."""
    if record.launch_error:
        how = record.launch_error
    elif record.signal is not None:
        how = f"killed by {signal_name(record.signal)} ({record.signal})"
    else:
        how = f"exit {record.exit_code}"
    parts = [how]
    if record.rank_exit_codes and record.launcher:
        root = record.root_cause_rank
        if root is not None and str(root) in record.rank_exit_codes:
            code = record.rank_exit_codes[str(root)]
            parts.append(f"rank {root} exit {code} (hidden by {record.launcher})")
        else:
            codes = ", ".join(f"rank {k} exit {v}" for k, v in sorted(record.rank_exit_codes.items()))
            parts.append(f"{codes} (hidden by {record.launcher})")
    if record.hung:
        parts.append(f"hung: no progress for {record.hang_timeout_s} s, group killed")
    if record.stop_signal:
        parts.append(f"wrapper got {record.stop_signal}, forwarded to the group")
    if record.in_job_restarts:
        parts.append(f"{record.launcher} restarted workers {record.in_job_restarts}x in place")
    return f"attempt {record.attempt} ended: " + ", ".join(parts)


def describe_decision(
    record: OutcomeRecord, *, rule_decision: Decision, max_retries: int, max_reschedules: int
) -> str:
    """``rule X: hint -> reschedule; node N marked for exclusion; reschedules left 1/2``.

    The policy's reason is added only when it changed the rule's decision (budgets
    exhausted, escalation, a stop signal), where it is the explanation a user needs.
    """
    text = f"rule {record.rule}"
    if record.hint:
        text += f": {_first_sentence(record.hint)}"
    text += f" -> {record.decision}"
    if record.decision is Decision.RETRY:
        text += f" in {record.backoff_s:g} s; retries left {record.retries_left}/{max_retries}"
    if record.exclude_node:
        text += f"; node {record.node} marked for exclusion"
    if record.decision is Decision.RESCHEDULE:
        if record.counts_as_failure:
            text += f"; reschedules left {record.reschedules_left}/{max_reschedules}"
        else:
            text += "; not counted as a failure"
    if record.reason and record.decision != rule_decision:
        text += f" (rule said {rule_decision}: {record.reason})"
    return text


def _first_sentence(text: str) -> str:
    sentence = text.strip().split(". ")[0].rstrip(".")
    return sentence if len(sentence) <= 160 else sentence[:157] + "..."


def say(line: str, stream: TextIO | None = None) -> None:
    """One ``resched: ...`` line on stderr, flushed (it interleaves with the command's)."""
    out = stream or sys.stderr
    out.write(f"resched: {clean(line)}\n")
    out.flush()


def emit_event(name: str, fields: Mapping[str, Any], stream: TextIO | None = None) -> None:
    """``resched: event <name> <json>`` for the local executor's timeline."""
    payload = {"t": time.time(), **fields}
    payload = redact_data(json.loads(json.dumps(payload, default=str)))  # an argv's values too
    say(f"event {name} {json.dumps(payload, sort_keys=True, default=str)}", stream)
