"""Reading NVRx's output (in-process restarts, straggler reports, ft_launcher's result)
and carrying ft_state.json: unit tests on real captured lines, no processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from wrapper.ft_state import read_ft_state, restore_ft_state, save_ft_state
from wrapper.classifier.nvrx_verdict import INPROCESS_RULE, STRAGGLER_RULE, apply_nvrx
from wrapper.classifier.nvrx_watch import NvrxWatch, read_straggler_report
from wrapper.policy import Budgets, decide
from wrapper.history import History
from wrapper.classifier.rules import load_rules
from wrapper.classifier.classify import Evidence, classify

FIXTURES = Path(__file__).parent / "fixtures" / "nvrx"
RULES = load_rules()


def watch_of(text: str) -> NvrxWatch:
    watch = NvrxWatch()
    for block in text.split("\n\n"):  # blocks, as the pumps deliver them
        watch.feed(block + "\n")
    return watch


def test_restart_abort_after_a_value_error_is_decided_by_its_root_cause() -> None:
    # Captured from examples/inprocess_train.py --fault value (NVRx 0.4.1, torch 2.13, gloo)
    watch = watch_of((FIXTURES / "inprocess-restart-abort-valueerror.log").read_text())
    verdict = watch.inprocess_verdict()
    assert verdict is not None
    assert (verdict.root_cause, verdict.decision, verdict.restarts) == ("ValueError", "abort", 2)
    # the classifier alone sees gloo's "Connection closed by peer" of the waiting rank
    evidence = {"exit_code": 1, "signal": None, "stop_signal": None}
    diagnosis = classify(Evidence(exit_code=1), RULES)
    replaced, findings = apply_nvrx(diagnosis, watch, evidence, None)
    assert (replaced.rule_id, replaced.decision, replaced.counts_as_failure) == (
        INPROCESS_RULE, "abort", True)
    assert findings.record_fields()["inprocess_root_cause"] == "ValueError"
    decision = decide(replaced, History(), Budgets(), node="n", allocation="a", step=None,
                      retries_used_in_allocation=0)
    assert decision.action == "abort"


@pytest.mark.parametrize("lines,cause,decision", [
    # the waiting rank's gloo timeout comes first in time: the failed rank's error wins
    (["rank=0 fn_ex: RuntimeError('[gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
      "waiting 3000ms for recv operation to complete')",
      "rank=1 fn_ex: KeyError('lr')"], "KeyError", "abort"),
    (["rank=1 fn_ex: RankShouldRestart('Interruption.EXCEPTION on ranks={1}') <- "
      "ConnectionError('peer went away')"], "ConnectionError", "reschedule"),
    (["rank=0 fn_ex: RuntimeError('Connection closed by peer [127.0.0.1]:1')"],
     "RuntimeError", "reschedule"),
    (["rank=3 fn_ex: nvidia_resiliency_ext.inprocess.exception.HealthCheckError()"],
     "HealthCheckError", "reschedule"),
])
def test_root_cause_table(lines: list[str], cause: str, decision: str) -> None:
    text = "\n".join(lines + ["RestartAbort('state.iteration=3 self.max_iterations=3 ')"])
    verdict = watch_of(text).inprocess_verdict()
    assert verdict is not None and (verdict.root_cause, verdict.decision) == (cause, decision)
    assert verdict.exclude_node is (cause == "HealthCheckError")
    assert verdict.restarts == 3


def test_too_few_ranks_left_is_a_reschedule() -> None:
    verdict = watch_of(
        "nvidia_resiliency_ext.inprocess.exception.RestartAbort: state.iteration=1 "
        "self.max_iterations=None state.world_size=4 self.min_world_size=4 "
        "state.active_world_size=3 self.min_active_world_size=4 ").inprocess_verdict()
    assert verdict is not None and verdict.decision == "reschedule"


def test_no_restart_abort_no_verdict_and_restarts_are_counted_per_rank() -> None:
    watch = watch_of("rank=0 fn_ex: RuntimeError('x')\nrank=1 fn_ex: RuntimeError('y')\n\n"
                     "rank=1 fn_ex: RuntimeError('z')")
    assert watch.inprocess_verdict() is None and watch.restarts == 2


def test_straggler_lines_as_nvrx_callbacks_print_them() -> None:
    watch = watch_of(
        "STRAGGLER DETECTION WARNING: Some GPUs have worse relative performance. Affected "
        "ranks: {StragglerId(rank=5, node='dgx-b07'), StragglerId(rank=12, node='dgx-c01')}\n"
        "  Rank=5 Node=dgx-b07 Score=0.41\n  Section=fwd Rank=12 Node=dgx-c01 Score=0.55")
    report = watch.straggler_report(None)
    assert report is not None and report.nodes == ("dgx-b07", "dgx-c01")
    assert report.scores == {5: 0.41} and report.section_scores == {"fwd": {12: 0.55}}
    evidence = {"exit_code": 0, "signal": None, "expect_finished": True, "finished": False}
    diagnosis = classify(Evidence(exit_code=0, expect_finished=True), RULES)
    replaced, findings = apply_nvrx(diagnosis, watch, evidence, report)
    assert (replaced.rule_id, replaced.decision) == (STRAGGLER_RULE, "reschedule")
    assert findings.exclude_nodes == ("dgx-b07", "dgx-c01")
    finished = {**evidence, "finished": True}  # training ended anyway: complete
    assert apply_nvrx(diagnosis, watch, finished, report)[0] is diagnosis


@pytest.mark.parametrize("content", ["", "{", "[]", '{"stragglers": "x"}',
                                     '{"rank_to_node": {"a": 1}}'])
def test_hostile_straggler_report_files_are_ignored(tmp_path: Path, content: str) -> None:
    path = tmp_path / "straggler.json"
    path.write_text(content)
    report = read_straggler_report(path)
    assert report is None or not report.flagged


def test_ft_launcher_exit_0_over_an_unhealthy_result_is_seen() -> None:
    watch = watch_of("[INFO] [ft_launcher9577@vm] Agent .run() is OK. No failures in the "
                     "result. result=RunResult(state=<WorkerState.UNHEALTHY: 'UNHEALTHY'>, "
                     "return_values={}, failures={1: ProcessFailure(local_rank=1)})")
    assert watch.launcher_unhealthy
    assert not watch_of("result=RunResult(state=<WorkerState.SUCCEEDED: 'SUCCEEDED'>")\
        .launcher_unhealthy


STATE = {"current_timeouts": {"heartbeat": {"initial": 6.0, "subsequent": 3.0,
                                            "were_calculated": True}}}


def test_ft_state_is_carried_and_restored_but_never_overwrites(tmp_path: Path) -> None:
    state_dir, ft = tmp_path / "state", tmp_path / "node" / "ft_state.json"
    ft.parent.mkdir()
    ft.write_text(json.dumps(STATE))
    assert save_ft_state(ft, state_dir) == STATE["current_timeouts"]
    ft.unlink()
    assert restore_ft_state(ft, state_dir) is not None
    assert json.loads(ft.read_text()) == STATE
    ft.write_text('{"current_timeouts": {"theirs": 1}}')  # the training's newer file
    assert restore_ft_state(ft, state_dir) is None
    assert json.loads(ft.read_text()) == {"current_timeouts": {"theirs": 1}}


def test_ft_state_never_follows_links_nor_saves_junk(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    target = tmp_path / "elsewhere.json"
    link = tmp_path / "ft_state.json"
    os.symlink(target, link)  # dangling: restoring through it would create a file elsewhere
    (state_dir / "nvrx").mkdir(parents=True)
    (state_dir / "nvrx" / "ft_state.json").write_text(json.dumps(STATE))
    assert restore_ft_state(link, state_dir) is None and not target.exists()
    target.write_text(json.dumps(STATE))
    assert read_ft_state(link) is None  # a link is not read either
    junk = tmp_path / "junk.json"
    for content in ("", "[1]", '{"other": 1}', "{"):
        junk.write_text(content)
        assert save_ft_state(junk, tmp_path / "s2") is None
    assert not (tmp_path / "s2").exists()


class _NullScanner:
    hits: tuple = ()

    def feed_text(self, text: str, stream: str) -> int:
        return text.count("\n")


def test_an_inprocess_restart_counts_as_a_heartbeat_only_for_a_heartbeating_training(
    tmp_path: Path,
) -> None:
    from wrapper.attempt import _ScanFeed

    beat = tmp_path / "heartbeat"
    beat.write_bytes(b"")
    os.utime(beat, ns=(1_000_000_000, 1_000_000_000))
    feed = _ScanFeed(_NullScanner(), beat)
    feed("rank=1 fn_ex: RuntimeError('boom')\n", "stderr")
    assert beat.stat().st_mtime_ns == 1_000_000_000  # no heartbeats yet: output is progress
    os.utime(beat, ns=(2_000_000_000, 2_000_000_000))  # the training's wrapper.heartbeat()
    feed("rank=1 fn_ex: RuntimeError('boom again')\n", "stderr")
    assert beat.stat().st_mtime_ns > 2_000_000_000  # the restart keeps the hang watch fed
    assert feed.nvrx.restarts == 2
    feed.heartbeat_file = None  # after the attempt: never touched again
    feed("rank=1 fn_ex: RuntimeError('late')\n", "stderr")
