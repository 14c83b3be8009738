"""One judge: `resched classify` and `resched wrap` decide alike on the same evidence.

Every log of the corpora (tests/fixtures/corpus, holdout, logs, logs/real, nvrx) goes
through both paths:

- classify: ``classify_artifacts`` reading the saved log (what the CLI runs);
- wrap: the attempt loop's own pieces, the real :class:`RuleJudge`, the ``_ScanFeed`` the
  supervisor feeds (the log arrives in whole-line blocks, as the pipe delivers it), the
  tails a :class:`SupervisedRun` keeps and ``AttemptRunner._evidence``.

The rule, category and decision must be equal. The last test runs a real `resched wrap`
subprocess on logs where the launcher's and NVRx's evidence decides (a launcher that
restarted and then finished, NVRx in-process restarts) and compares its outcome record
with `resched classify --format json` on the same log.
"""

from __future__ import annotations

import json
import signal as _signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.supervise_fixtures import REPO, child_env
from wrapper.attempt import AttemptRunner, _ScanFeed
from wrapper.classifier.diagnosis import Diagnosis
from wrapper.classifier.verdict import classify_artifacts
from wrapper.config import WrapConfig
from wrapper.judge import RuleJudge
from wrapper.supervise import SignalRelay, SupervisedRun

FIXTURES = Path(__file__).parent / "fixtures"
_BLOCK = 64 * 1024  # a pipe's worth of output per feed
_TAIL = 200  # lines of each stream a SupervisedRun keeps (SuperviseOptions.tail_lines)


def _labelled(index: Path) -> list[dict[str, Any]]:
    entries = yaml.safe_load(index.read_text(encoding="utf-8"))["entries"]
    return [{"name": f"{index.parent.name}/{e['id']}", "base": index.parent / "logs",
             "logs": [f"{e['id']}.log"], "exit_code": e.get("exit_code"), "signal": e.get("signal")}
            for e in entries]


def _cases(folder: Path) -> list[dict[str, Any]]:
    cases = yaml.safe_load((folder / "cases.yaml").read_text(encoding="utf-8"))["cases"]
    return [{**c, "name": f"{folder.name}/{c['name']}", "base": folder} for c in cases]


CASES = (_labelled(FIXTURES / "corpus" / "corpus.yaml") + _labelled(FIXTURES / "holdout" / "holdout.yaml")
         + _cases(FIXTURES / "logs") + _cases(FIXTURES / "logs" / "real")
         + [{"name": "nvrx/inprocess-restart-abort-valueerror", "base": FIXTURES / "nvrx",
             "logs": ["inprocess-restart-abort-valueerror.log"], "exit_code": 1}])
JUDGE_RULES = None


def _finished(case: dict[str, Any]) -> tuple[bool, bool]:
    state = case.get("expect_finished")
    return state is not None, state == "finished"


def classify_path(case: dict[str, Any], judge: RuleJudge) -> Any:
    base, launcher = case["base"], case.get("launcher")
    expect, finished = _finished(case)
    return classify_artifacts(
        logs=[base / p for p in case["logs"]], error_files=[base / p for p in case.get("error_files", [])],
        exit_code=case.get("exit_code"), signal=case.get("signal"), rules=judge.rules,
        tracker_file=base / case["tracker"] if case.get("tracker") else None,
        hung=bool(case.get("hung")), stop_signal=case.get("stop_requested"),
        expect_finished=expect, finished=finished,
        launcher=None if launcher in (None, "none") else launcher)


def _blocks(text: str) -> list[str]:
    """Whole-line blocks of about a pipe's size, as the supervisor hands them on."""
    out, start = [], 0
    while start < len(text):
        cut = text.rfind("\n", start, start + _BLOCK) + 1 or min(len(text), start + _BLOCK)
        if cut <= start:
            cut = min(len(text), start + _BLOCK)
        out.append(text[start:cut])
        start = cut
    return out


def wrap_path(case: dict[str, Any], judge: RuleJudge, tmp_path: Path) -> Any:
    base, launcher = case["base"], case.get("launcher")
    command = [launcher if launcher in ("torchrun", "ft_launcher") else "python", "train.py"]
    if case.get("tracker"):
        command += ["--result-rejected-tracker-filename", str(base / case["tracker"])]
    expect, finished = _finished(case)
    flag = tmp_path / "finished.flag"
    if finished:
        flag.write_text("")
    config = WrapConfig(command=tuple(command), state_dir=tmp_path, node="node-a", allocation="a1",
                        expect_finished_flag=flag if expect else None)
    runner = AttemptRunner(config, judge, SignalRelay(_signal.SIGTERM), {}, lambda: 0.0,
                           tmp_path / "heartbeat")
    feed = _ScanFeed(judge.new_scanner())
    lines: list[str] = []
    for name in case["logs"]:
        text = (base / name).read_text(encoding="utf-8", errors="replace")
        for block in _blocks(text):
            feed(block, "stdout")
        lines += text.splitlines()
    run = SupervisedRun(exit_code=case.get("exit_code"), signal=case.get("signal"), started_at=0.0,
                        ended_at=1.0, wall_s=1.0, hung=bool(case.get("hung")),
                        stop_signal=case.get("stop_requested"), launch_error=None,
                        stdout_tail=tuple(lines[-_TAIL:]), stderr_tail=(),
                        leftover_processes_killed=0)
    evidence = runner._evidence(run, tmp_path, feed)
    evidence["error_files"] = tuple(base / p for p in case.get("error_files", []))
    return judge.classify(evidence)


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> RuleJudge:
    return RuleJudge(rule_files=(), state_dir=tmp_path_factory.mktemp("state"), max_retries=3,
                     max_reschedules=2, reset_on_progress=True)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_classify_and_wrap_decide_alike(case: dict[str, Any], judge: RuleJudge, tmp_path: Path) -> None:
    assert_decided_alike(classify_path(case, judge), wrap_path(case, judge, tmp_path))


def assert_decided_alike(by_classify: Diagnosis, by_wrap: Diagnosis) -> None:
    """The same rule, category, decision and finish evidence on both paths."""
    assert (by_wrap.rule_id, by_wrap.category, str(by_wrap.decision)) == (
        by_classify.rule_id, by_classify.category, str(by_classify.decision)), (
        by_classify.why_won, by_wrap.why_won)
    assert by_wrap.finished_by == by_classify.finished_by


REAL_RUN_CASES = ["logs/ft-launcher-restarted-then-succeeded", "logs/hf-finished-then-nccl-teardown",
                  "nvrx/inprocess-restart-abort-valueerror", "logs/exit0-oom-no-traceback"]


@pytest.mark.e2e
@pytest.mark.parametrize("name", REAL_RUN_CASES)
def test_real_wrap_run_agrees_with_classify(name: str, tmp_path: Path) -> None:
    case = next(c for c in CASES if c["name"] == name)
    log = case["base"] / case["logs"][0]
    code = case.get("exit_code")
    code = 128 + case["signal"] if code is None else code
    script = f"import sys; sys.stdout.write(open({str(log)!r}, encoding='utf-8').read()); sys.exit({code})"
    env = child_env()
    wrapped = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(tmp_path / "state"),
         "--node", "node-a", "--max-retries", "0", "--max-reschedules", "0", "--",
         sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    record = json.loads(next((tmp_path / "state" / "attempts").glob("*.json")).read_text())
    classified = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "classify", "--log", str(log), "--exit-code", str(code),
         "--format", "json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert classified.returncode == 0, classified.stderr
    verdict = json.loads(classified.stdout)
    assert (record["rule"], record["category"]) == (verdict["rule"], verdict["category"]), wrapped.stderr
    if verdict["decision"] in ("complete", "abort"):  # budgets (0 here) only change retries
        assert record["decision"] == verdict["decision"], wrapped.stderr
