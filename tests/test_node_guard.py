"""Leaving a node the history excluded: the pure rule, then `resched wrap` for real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.supervise_fixtures import child_env
from wrapper.history import History, HistoryStore, with_outcome
from wrapper.node_guard import GUARD_RULE, MAX_GUARD_EXITS, excluded_nodes, guard


def _history(*records: dict) -> History:  # type: ignore[type-arg]
    history = History()
    for record in records:
        history = with_outcome(history, record)
    return history


def test_excluded_nodes_come_from_records_and_straggler_lists() -> None:
    history = _history(
        {"node": "dgx-1", "rule": "gpu-hardware-fault", "exclude_node": True},
        {"node": "dgx-2", "rule": "nccl-error", "exclude_node": False},
        {"node": "dgx-3", "rule": "straggler", "exclude_nodes": ["dgx-4", "", 7]},
    )
    assert excluded_nodes(history) == {"dgx-1": "gpu-hardware-fault", "dgx-4": "straggler"}
    assert guard(history, "dgx-1").leave and "gpu-hardware-fault" in guard(history, "dgx-1").reason
    assert guard(history, "dgx-2") == guard(history, "dgx-9") == guard(history, "dgx-3")
    assert not guard(history, "dgx-2").leave and guard(history, "dgx-2").reason == ""


def test_a_pool_with_no_other_node_runs_anyway_after_a_few_bounces() -> None:
    records = [{"node": "dgx-1", "rule": "gpu-hardware-fault", "exclude_node": True}]
    records += [{"node": "dgx-1", "rule": GUARD_RULE}] * MAX_GUARD_EXITS
    verdict = guard(_history(*records), "dgx-1")
    assert not verdict.leave and "anyway" in verdict.reason
    # a bounce elsewhere in between breaks the run of guard exits
    records.insert(-1, {"node": "dgx-2", "rule": "nccl-error"})
    assert guard(_history(*records), "dgx-1").leave


def _wrap(state: Path, node: str, marker: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(state), "--node",
            node, "--reschedule-code", "3", "--", sys.executable, "-c",
            f"open({str(marker)!r}, 'a').write('ran\\n')"]
    return subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=120,
                          check=False)


def test_wrap_leaves_an_excluded_node_before_the_training_starts(tmp_path: Path) -> None:
    state, marker = tmp_path / "state", tmp_path / "ran"
    HistoryStore(state).record({"attempt": 1, "node": "dgx-a17", "rule": "gpu-hardware-fault",
                                "decision": "reschedule", "exclude_node": True,
                                "counts_as_failure": True})
    left = _wrap(state, "dgx-a17", marker)
    assert left.returncode == 3 and not marker.exists(), left.stderr
    assert "dgx-a17 was excluded" in left.stderr
    records = sorted((state / "attempts").glob("*.json"))
    last = json.loads(records[-1].read_text())
    assert (last["rule"], last["decision"], last["counts_as_failure"]) == (
        GUARD_RULE, "reschedule", False)
    # another node runs the training as usual
    elsewhere = _wrap(state, "dgx-b02", marker)
    assert elsewhere.returncode == 0 and marker.read_text() == "ran\n", elsewhere.stderr
