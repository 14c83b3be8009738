"""In-process restart (nvidia_resiliency_ext.inprocess.Wrapper, gloo on CPU) under
`resched wrap`: the example training, real torchrun, real NVRx 0.4.1."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nvrx_fixtures import free_port_block, records, wrap
from tests.supervise_fixtures import REPO

pytest.importorskip("nvidia_resiliency_ext.inprocess")
pytestmark = [pytest.mark.e2e, pytest.mark.torch, pytest.mark.slow]


def example(fault: str, flag: Path) -> list[str]:
    return ["torchrun", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
            "--master-port", str(free_port_block(3)), "--max-restarts", "0",
            str(REPO / "examples" / "inprocess_train.py"), "--steps", "8",
            "--fail-at-step", "3", "--step-time", "0.01", "--collective-timeout", "3",
            "--max-restarts", "2", "--fault", fault, "--finished-flag", str(flag)]


def test_inprocess_restart_that_succeeds_is_one_complete_attempt(tmp_path: Path) -> None:
    flag, state = tmp_path / "finished", tmp_path / "state"
    result = wrap(state, ["--expect-finished-flag", str(flag), "--hang-timeout", "60"],
                  example("once", flag))
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = records(state)
    assert record["decision"] == "complete" and record["rule"] == "complete-finished"
    assert record["inprocess_restarts"] == 1  # counted in the record, not as an attempt
    assert "finished after 1 in-process restart(s)" in result.stdout


def test_restart_abort_from_a_deterministic_bug_aborts(tmp_path: Path) -> None:
    flag, state = tmp_path / "finished", tmp_path / "state"
    result = wrap(state, ["--expect-finished-flag", str(flag)], example("value", flag))
    assert result.returncode == 1, result.stderr[-3000:]
    (record,) = records(state)
    # Without the root cause this ends as a gloo "Connection closed by peer" -> retry.
    assert (record["rule"], record["decision"]) == ("nvrx-inprocess-restart-abort", "abort")
    assert record["inprocess_root_cause"] == "ValueError"
    assert record["inprocess_restarts"] == 2
    assert "ValueError" in record["hint"] and not flag.exists()
