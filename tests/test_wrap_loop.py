"""The attempt loop with a scripted judge (pure decision logic faked; processes are real)."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.supervise_fixtures import child_env, wait_for_file
from wrapper.outcome import OutcomeRecord
from wrapper.wrap import INTERNAL_ERROR_EXIT, WrapConfig, WrapConfigError, run_wrap


@dataclass(frozen=True)
class FakeHistory:
    attempts: tuple[Mapping[str, Any], ...] = ()
    calibrated_hang_timeout: float | None = None


@dataclass(frozen=True)
class FakeDiagnosis:
    rule_id: str
    decision: str
    category: str = "test"
    hint: str = "scripted."
    evidence: tuple[Any, ...] = ()
    rank_exit_codes: Mapping[int, int] = field(default_factory=dict)
    root_cause_rank: int | None = None
    counts_as_failure: bool = True


@dataclass(frozen=True)
class FakeDecision:
    action: str
    reason: str = "scripted"
    backoff_s: float = 7.0
    exclude_node: bool = False
    retries_left: int = 1
    reschedules_left: int = 1


class FakeScanner:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def feed(self, line: str, stream: str = "stdout") -> None:
        self.lines.append((stream, line))

    @property
    def hits(self) -> tuple[Any, ...]:
        return ()


class ScriptedJudge:
    """Decides from a list: one action per attempt."""

    def __init__(self, actions: list[str], *, fail_classify: bool = False) -> None:
        self.actions = list(actions)
        self.evidence: list[Mapping[str, Any]] = []
        self.history = FakeHistory()
        self.fail_classify = fail_classify
        self.scanners: list[FakeScanner] = []

    def new_scanner(self) -> FakeScanner:
        self.scanners.append(FakeScanner())
        return self.scanners[-1]

    def load_history(self) -> FakeHistory:
        return self.history

    def classify(self, evidence: Mapping[str, Any]) -> FakeDiagnosis:
        if self.fail_classify:
            raise RuntimeError("classifier bug")
        self.evidence.append(evidence)
        return FakeDiagnosis(rule_id=f"scripted-{len(self.evidence)}", decision=self.actions[0])

    def decide(self, diagnosis: FakeDiagnosis, history: FakeHistory, **_: Any) -> FakeDecision:
        return FakeDecision(action=self.actions.pop(0))

    def record(self, outcome: OutcomeRecord) -> FakeHistory:
        self.history = FakeHistory(attempts=(*self.history.attempts, outcome.to_dict()))
        return self.history


def config(tmp_path: Path, command: list[str], **overrides: Any) -> WrapConfig:
    values: dict[str, Any] = {
        "command": tuple(command), "state_dir": tmp_path / "state", "node": "node-a",
        "allocation": "alloc-1", "grace_s": 2.0, "outcome_file": tmp_path / "outcome.json", "poll_s": 0.02,
    }
    values.update(overrides)
    return WrapConfig(**values)


def test_retry_then_complete_sleeps_the_backoff_and_records_each_attempt(tmp_path: Path) -> None:
    judge = ScriptedJudge(["retry", "complete"])
    slept: list[float] = []
    code = run_wrap(config(tmp_path, ["sh", "-c", "echo step; exit 1"]), judge=judge,
                    environ=child_env(), sleep=lambda s: slept.append(s) is not None)
    assert code == 0
    assert slept == [7.0]
    records = sorted((tmp_path / "state" / "attempts").glob("*.json"))
    assert [r.name for r in records] == ["attempt-0001.node-a.json", "attempt-0002.node-a.json"]
    first = json.loads(records[0].read_text())
    assert (first["attempt"], first["exit_code"], first["decision"]) == (1, 1, "retry")
    assert first["command"] == ["sh", "-c", "echo step; exit 1"]
    for key in ("allocation", "node", "started_at", "ended_at", "wall_s", "signal",
                "rank_exit_codes", "root_cause_rank", "rule", "category", "evidence", "reason",
                "exclude_node", "retries_left", "reschedules_left", "checkpoint_step_before",
                "checkpoint_step_after", "hung"):
        assert key in first
    assert judge.scanners[0].lines == [("stdout", "step")]
    final = json.loads((tmp_path / "outcome.json").read_text())
    assert (final["attempt"], final["decision"], final["wrapper_exit_code"]) == (2, "complete", 0)
    tail = (tmp_path / "state" / "attempts" / "attempt-0001.node-a" / "stdout.tail.log")
    assert tail.read_text() == "step\n"


@pytest.mark.parametrize(("action", "codes", "expected"), [
    ("reschedule", {}, 3), ("abort", {}, 1), ("complete", {}, 0),
    ("reschedule", {"reschedule_code": 42, "abort_code": 9}, 42),
    ("abort", {"reschedule_code": 42, "abort_code": 9}, 9),
])
def test_decision_becomes_the_exit_code(
    tmp_path: Path, action: str, codes: dict[str, int], expected: int
) -> None:
    code = run_wrap(config(tmp_path, ["true"], **codes), judge=ScriptedJudge([action]),
                    environ=child_env())
    assert code == expected
    assert json.loads((tmp_path / "outcome.json").read_text())["wrapper_exit_code"] == expected


@pytest.mark.parametrize("codes", [
    {"reschedule_code": 0}, {"abort_code": 256}, {"reschedule_code": 5, "abort_code": 5},
    {"reschedule_code": -1},
])
def test_invalid_exit_codes_are_refused_before_running(tmp_path: Path, codes: dict[str, int]) -> None:
    with pytest.raises(WrapConfigError):
        run_wrap(config(tmp_path, ["true"], **codes), judge=ScriptedJudge(["complete"]))
    assert not (tmp_path / "state").exists()


def test_checkpoint_url_without_a_local_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WrapConfigError, match="needs --checkpoint-dir"):
        run_wrap(config(tmp_path, ["true"], checkpoint_url=f"file://{tmp_path}/store"),
                 judge=ScriptedJudge(["complete"]))


def test_empty_command_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WrapConfigError, match="no command"):
        run_wrap(config(tmp_path, []), judge=ScriptedJudge(["complete"]))


def test_a_wrapper_bug_exits_70_never_0(tmp_path: Path) -> None:
    code = run_wrap(config(tmp_path, ["true"]), judge=ScriptedJudge(["complete"], fail_classify=True),
                    environ=child_env())
    assert code == INTERNAL_ERROR_EXIT
    final = json.loads((tmp_path / "outcome.json").read_text())
    assert final["wrapper_exit_code"] == INTERNAL_ERROR_EXIT


def test_command_not_found_is_abort_even_if_the_rules_said_retry(tmp_path: Path) -> None:
    judge = ScriptedJudge(["retry"])
    code = run_wrap(config(tmp_path, ["resched-no-such-command-xyz"]), judge=judge,
                    environ=child_env(), sleep=lambda s: False)
    assert code == 1
    assert judge.evidence[0]["exit_code"] == 127
    final = json.loads((tmp_path / "outcome.json").read_text())
    assert final["decision"] == "abort"
    assert final["launch_error"] == "command not found: resched-no-such-command-xyz"


def test_stop_signal_during_backoff_leaves_with_the_reschedule_code(tmp_path: Path) -> None:
    judge = ScriptedJudge(["retry", "complete"])

    def interrupted_sleep(seconds: float) -> bool:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while "sleeping"
        return True

    code = run_wrap(config(tmp_path, ["false"]), judge=judge, environ=child_env(),
                    sleep=interrupted_sleep)
    assert code == 3
    final = json.loads((tmp_path / "outcome.json").read_text())
    assert (final["decision"], final["stop_signal"]) == ("reschedule", "SIGTERM")
    assert len(judge.evidence) == 1  # no second attempt


def test_a_retry_decision_under_a_stop_signal_becomes_reschedule(tmp_path: Path) -> None:
    judge = ScriptedJudge(["retry"])
    started = tmp_path / "started"

    def preempt_once_running() -> None:
        wait_for_file(started)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=preempt_once_running, daemon=True).start()
    code = run_wrap(config(tmp_path, ["sh", "-c", f"echo up > {started}; sleep 30"]),
                    judge=judge, environ=child_env(), sleep=lambda s: False)
    assert code == 3
    assert judge.evidence[0]["stop_signal"] == "SIGTERM"
    assert judge.evidence[0]["signal"] == signal.SIGTERM
    final = json.loads((tmp_path / "outcome.json").read_text())
    assert final["decision"] == "reschedule" and "no retry in place" in final["reason"]


def test_evidence_carries_the_finished_flag_and_launcher(tmp_path: Path) -> None:
    flag = tmp_path / "FINISHED"
    judge = ScriptedJudge(["complete", "complete"])
    run_wrap(config(tmp_path, ["true"], expect_finished_flag=flag), judge=judge,
             environ=child_env())
    flag.write_text("done")
    run_wrap(config(tmp_path, ["env", "A=1", "torchrun", "--version"], expect_finished_flag=flag),
             judge=judge, environ=child_env())
    first, second = judge.evidence
    assert (first["expect_finished"], first["finished"], first["launcher"]) == (True, False, None)
    assert (second["finished"], second["launcher"]) == (True, "torchrun")


def test_heartbeat_file_and_attempt_are_in_the_child_environment(tmp_path: Path) -> None:
    dump = tmp_path / "env.json"
    program = (f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))")
    run_wrap(config(tmp_path, ["python3", "-c", program]), judge=ScriptedJudge(["complete"]),
             environ=child_env())
    env = json.loads(dump.read_text())
    assert env["RESCHED_ATTEMPT"] == "1"
    assert env["RESCHED_NODE"] == "node-a"
    assert env["RESCHED_HEARTBEAT_FILE"]
    assert env["TORCHELASTIC_ERROR_FILE"].endswith("attempt-0001.node-a/error.json")
    assert "PET_LOG_DIR" not in env  # only for launchers
