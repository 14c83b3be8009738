"""What the wrapper and the tools around it must agree on: defaults and variable names.

``resched wrap`` (wrapper), its CLI and the workflow linter (workflows) all read these,
so a default changes in one place. It imports only leaf modules (the decision enum,
the hang settings), so ``wrapper.attempt`` and ``wrapper.wrap`` both import it without
importing each other.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

from wrapper.backoff import Backoff
from wrapper.decision import Decision
from wrapper.hang import HangSettings

# exit codes of `resched wrap`
DEFAULT_RESCHEDULE_CODE = 3
DEFAULT_ABORT_CODE = 1
INTERNAL_ERROR_EXIT = 70  # EX_SOFTWARE: a wrapper bug, never mistaken for success

# budgets
DEFAULT_MAX_RETRIES = 3
DEFAULT_MAX_RESCHEDULES = 2
DEFAULT_MAX_NODE_REPLACEMENTS = 8  # reschedules off a blamed node, without progress
# the in-place retry backoff's defaults live in wrapper.backoff.Backoff

# timing
DEFAULT_GRACE_S = 30.0
DEFAULT_HANG_GRACE_S = 5.0
DEFAULT_TEARDOWN_TIMEOUT_S = 30.0  # wrapper.teardown

# environment: options of `resched wrap`
RESCHEDULE_CODE_ENV = "RESCHED_RESCHEDULE_CODE"
ABORT_CODE_ENV = "RESCHED_ABORT_CODE"
MAX_RETRIES_ENV = "RESCHED_MAX_RETRIES"
MAX_RESCHEDULES_ENV = "RESCHED_MAX_RESCHEDULES"
GRACE_ENV = "RESCHED_GRACE"
BACKOFF_ENV = "RESCHED_BACKOFF"
HANG_GRACE_ENV = "RESCHED_HANG_GRACE"
HANG_TIMEOUT_ENV = "RESCHED_HANG_TIMEOUT"
TEARDOWN_TIMEOUT_ENV = "RESCHED_TEARDOWN_TIMEOUT"
CHECKPOINT_DIR_ENV = "RESCHED_CHECKPOINT_DIR"
CHECKPOINT_URL_ENV = "RESCHED_CHECKPOINT_URL"
SYNC_EVERY_ENV = "RESCHED_SYNC_EVERY"
STATE_DIR_ENV = "RESCHED_STATE_DIR"
EXPECT_FINISHED_FLAG_ENV = "RESCHED_EXPECT_FINISHED_FLAG"
NODE_ENV = "RESCHED_NODE"
OUTCOME_FILE_ENV = "RESCHED_OUTCOME_FILE"
ALLOCATION_ENV = "RESCHED_ALLOCATION"

# environment: what the wrapper sets for the command it runs
HEARTBEAT_FILE_ENV = "RESCHED_HEARTBEAT_FILE"  # same name as wrapper.heartbeat.HEARTBEAT_ENV
ATTEMPT_ENV = "RESCHED_ATTEMPT"


@dataclass(frozen=True)
class WrapConfig:
    """Everything one ``resched wrap`` run was asked to do."""

    command: tuple[str, ...]
    state_dir: Path
    node: str
    allocation: str
    reschedule_code: int = DEFAULT_RESCHEDULE_CODE
    abort_code: int = DEFAULT_ABORT_CODE
    max_retries: int = DEFAULT_MAX_RETRIES
    max_reschedules: int = DEFAULT_MAX_RESCHEDULES
    reset_on_progress: bool = True
    backoff: Backoff = field(default_factory=Backoff)
    grace_s: float = DEFAULT_GRACE_S
    hang_grace_s: float = DEFAULT_HANG_GRACE_S
    hang: HangSettings = field(default_factory=HangSettings)
    heartbeat_file: Path | None = None
    checkpoint_dir: Path | None = None
    checkpoint_url: str | None = None
    sync_every_s: float | None = None
    rule_files: tuple[Path, ...] = ()
    expect_finished_flag: Path | None = None
    outcome_file: Path | None = None
    poll_s: float = 0.05
    # what any stop the wrapper receives reaches the training as (--stop-signal)
    stop_signal: int = signal.SIGTERM
    stop_broadcast: bool = False  # the scheduler signals every process (Slurm job steps)
    ft_state: Path | None = None  # NVRx ft_state.json to carry across reschedules
    # a training that said it finished but does not exit is ended after this (None: never)
    teardown_timeout_s: float | None = DEFAULT_TEARDOWN_TIMEOUT_S

    @property
    def stop_signal_name(self) -> str:
        return signal.Signals(self.stop_signal).name

    def exit_code_for(self, decision: Decision | str) -> int:
        """The wrapper's exit code for its final decision (retry never leaves)."""
        match Decision.parse(decision):
            case Decision.COMPLETE:
                return 0
            case Decision.RESCHEDULE:
                return self.reschedule_code
            case _:
                return self.abort_code
