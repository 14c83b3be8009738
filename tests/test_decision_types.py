"""The typed decision path: one Decision enum, shared defaults, no attempt <-> wrap cycle."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from wrapper import config
from wrapper.decision import Decision
from wrapper.heartbeat import HEARTBEAT_ENV
from wrapper.history import History, PastAttempt
from wrapper.policy import Budgets, decide
from wrapper.classifier.rules import load_rules
from wrapper.classifier import classify_artifacts


def test_decision_parses_words_and_rejects_others() -> None:
    assert Decision.parse("retry") is Decision.RETRY
    assert Decision.parse(Decision.ABORT) is Decision.ABORT
    assert json.dumps({"d": Decision.RESCHEDULE}) == '{"d": "reschedule"}'
    with pytest.raises(ValueError, match="'retried' is not a decision"):
        Decision.parse("retried")


@pytest.mark.parametrize(("decision", "code"), [
    (Decision.COMPLETE, 0), (Decision.RESCHEDULE, 42), (Decision.ABORT, 9), ("abort", 9),
])
def test_exit_code_for_each_final_decision(tmp_path, decision, code) -> None:
    cfg = config.WrapConfig(command=("x",), state_dir=tmp_path, node="n", allocation="a",
                            reschedule_code=42, abort_code=9)
    assert cfg.exit_code_for(decision) == code


def test_defaults_live_in_one_place() -> None:
    from workflows.cli.wrap_cmds import wrap
    from workflows.lint import wrap_scan

    defaults = {p.name: p.default for p in wrap.params}
    assert defaults["reschedule_code"] == config.DEFAULT_RESCHEDULE_CODE == wrap_scan.DEFAULT_RESCHEDULE_CODE
    assert defaults["abort_code"] == config.DEFAULT_ABORT_CODE == config.WrapConfig(
        command=("x",), state_dir=".", node="n", allocation="a").abort_code
    assert defaults["max_retries"] == Budgets().max_retries == config.DEFAULT_MAX_RETRIES
    # heartbeat.py imports only os/time (it runs every step), so it keeps its own copy
    assert HEARTBEAT_ENV == config.HEARTBEAT_FILE_ENV


def test_attempt_imports_without_wrap() -> None:
    code = "import sys, wrapper.attempt; assert 'wrapper.wrap' not in sys.modules, 'cycle'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_policy_and_classifier_hand_back_the_enum(tmp_path) -> None:
    log = tmp_path / "log"
    log.write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    rules = load_rules()
    diagnosis = classify_artifacts(logs=[log], error_files=[], exit_code=1, signal=None, rules=rules)
    assert diagnosis.decision is Decision.RETRY
    verdict = decide(diagnosis, History(), Budgets(), node="n", allocation="a", step=None,
                     retries_used_in_allocation=0)
    assert verdict.action is Decision.RETRY
    assert diagnosis.to_json()["decision"] == "retry"


def test_past_attempts_tolerate_hand_written_history() -> None:
    past = PastAttempt.from_record({"decision": "retried", "checkpoint_step_after": "7", "node": 3})
    assert (past.decision, past.step, past.node, past.failure) == (None, None, "3", True)
    ok = PastAttempt.from_record({"decision": "complete", "rule": "complete"})
    assert (ok.decision, ok.failure) == (Decision.COMPLETE, False)
