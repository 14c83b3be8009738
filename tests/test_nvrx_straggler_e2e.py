"""A straggler stop under `resched wrap`: real NVRx straggler.Detector on gloo / CPU
(only CUPTI's CUDA-only calls stubbed, see examples/straggler_train.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nvrx_fixtures import free_port_block, records, wrap
from tests.supervise_fixtures import REPO

pytest.importorskip("nvidia_resiliency_ext.straggler")
pytest.importorskip("nvidia.cuda_cupti")
pytestmark = [pytest.mark.e2e, pytest.mark.torch, pytest.mark.slow]


def test_straggler_stop_reschedules_without_the_flagged_node(tmp_path: Path) -> None:
    flag, state = tmp_path / "finished", tmp_path / "state"
    command = ["torchrun", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port_block(1)),
               str(REPO / "examples" / "straggler_train.py"), "--cpu-stubs",
               "--slow-rank", "1", "--slow-factor", "4", "--node-name", "dgx-{rank}",
               "--finished-flag", str(flag)]
    result = wrap(state, ["--expect-finished-flag", str(flag)], command)
    assert result.returncode == 3, result.stderr[-3000:]
    (record,) = records(state)
    assert (record["rule"], record["category"], record["decision"]) == (
        "nvrx-straggler-stop", "straggler", "reschedule")
    assert record["exclude_nodes"] == ["dgx-1"] and record["stragglers"] == {"1": "dgx-1"}
    # relative performance per rank and section, from NVRx's report
    scores = record["straggler_section_scores"]["step"]
    assert scores["0"] == pytest.approx(1.0) and scores["1"] < 0.5
    assert record["counts_as_failure"] is False and not flag.exists()
    assert record["exclude_node"] is False  # this wrapper's node (node-a) was not flagged
