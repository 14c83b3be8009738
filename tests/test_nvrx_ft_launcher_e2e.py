"""Real NVRx 0.4.1 ft_launcher (2 ranks, CPU) under `resched wrap`: the wrapper's decision
for a heartbeat hang kill, a section timeout kill, a Python bug until the in-job restarts
are spent, and a rank's Megatron exit 16 / 17 hidden behind ft_launcher's exit 1; and
NVRx's calculated timeouts (ft_state.json) carried to the next allocation."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.nvrx_fixtures import records, wrap
from tests.supervise_fixtures import REPO, child_env

FT_LAUNCHER = Path(sys.executable).with_name("ft_launcher")
pytestmark = [
    pytest.mark.e2e, pytest.mark.slow,
    pytest.mark.skipif(not FT_LAUNCHER.exists() and shutil.which("ft_launcher") is None,
                       reason="no ft_launcher"),
]

# A plain worker (no torch, no resched): rank 1 misbehaves as MODE says, rank 0 trains on.
WORKER = textwrap.dedent("""
    import json, os, sys, time
    from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

    mode, rank = sys.argv[1], int(os.environ["RANK"])
    state_file = os.environ.get("FT_STATE_FILE")
    client = RankMonitorClient()
    if state_file and os.path.exists(state_file):
        client.load_state_dict(json.load(open(state_file)))
        print(f"rank {rank} loaded ft_state", flush=True)
    client.init_workload_monitoring()
    for step in range(1, 13):
        client.start_section("step")
        client.send_heartbeat()
        if rank == 1 and step == 4:
            if mode == "heartbeat":
                client.end_section("step")
                time.sleep(600)  # alive, but no heartbeat any more
            if mode == "section":
                while True:  # heartbeats go on, the section never ends
                    client.send_heartbeat(); time.sleep(0.2)
            if mode == "bug":
                raise KeyError("learning_rate")  # the config has no such key: every time
            if mode == "kill-once" and not os.path.exists(os.environ["KILLED_ONCE"]):
                open(os.environ["KILLED_ONCE"], "w").write("1")  # the next round trains on
                os.kill(os.getpid(), 9)
            if mode in ("16", "17"):
                print(f"rank {rank}: exiting {mode} (Megatron rerun state machine)", flush=True)
                sys.exit(int(mode))
        time.sleep(0.05)
        client.end_section("step")
        print(f"rank {rank} step {step}", flush=True)
    if mode == "calibrate":  # NVRx agrees on the timeouts across ranks: a process group
        import torch.distributed as dist
        dist.init_process_group("gloo")
        client.calculate_and_set_hb_timeouts()
        client.calculate_and_set_section_timeouts()
        if rank == 0 and state_file:
            json.dump(client.state_dict(), open(state_file, "w"))
        if rank == 0:
            open(os.environ["FAULT_TOL_FINISHED_FLAG_FILE"], "w").write("done")
        dist.destroy_process_group()
    client.shutdown_workload_monitoring()
""")


def ft_command(tmp_path: Path, mode: str, *, max_restarts: int = 0) -> list[str]:
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    launcher = str(FT_LAUNCHER) if FT_LAUNCHER.exists() else "ft_launcher"
    return [launcher, "--standalone", "--nproc-per-node", "2", "--monitor-interval", "1",
            "--max-restarts", str(max_restarts),
            "--ft-initial-rank-heartbeat-timeout", "6", "--ft-rank-heartbeat-timeout", "3",
            "--ft-rank-section-timeouts", "step:3", "--ft-rank-out-of-section-timeout", "6",
            str(worker), mode]


@pytest.mark.parametrize("mode,rule,decision,evidence", [
    ("heartbeat", "nvrx-hang-kill", "reschedule", "Did not get subsequent heartbeat"),
    ("section", "nvrx-hang-kill", "reschedule", "Section 'step' has been open for"),
])
def test_rank_monitor_hang_kills(tmp_path: Path, mode: str, rule: str, decision: str,
                                 evidence: str) -> None:
    state = tmp_path / "state"
    result = wrap(state, ["--max-retries", "0"], ft_command(tmp_path, mode), GROUP_RANK="0")
    assert result.returncode == 3, result.stderr[-3000:]
    (record,) = records(state)
    assert (record["rule"], record["category"], record["decision"]) == (rule, "hang", decision)
    assert any(evidence in line["text"] for line in record["evidence"]), record["evidence"]
    # NVRx 0.4.1's ft_launcher exits 0 here (--max-restarts 0): not a complete training
    assert record["exit_code"] == 1 or record["launcher_reported_unhealthy"] is True


def test_python_bug_until_in_job_restarts_are_spent_aborts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    result = wrap(state, ["--max-retries", "2"], ft_command(tmp_path, "bug", max_restarts=1),
                  GROUP_RANK="0")
    assert result.returncode == 1, result.stderr[-3000:]
    (record,) = records(state)  # no retry on top of ft_launcher's restart: abort at once
    assert (record["rule"], record["decision"]) == ("python-user-error", "abort")
    assert record["in_job_restarts"] == 1 and record["root_cause_rank"] == 1


@pytest.mark.parametrize("code,rule,decision", [
    (16, "megatron-rerun-16", "reschedule"),
    (17, "megatron-rerun-17", "reschedule"),  # retry wanted, no in-place budget: reschedule
])
def test_megatron_exit_hidden_behind_ft_launcher(tmp_path: Path, code: int, rule: str,
                                                 decision: str) -> None:
    state = tmp_path / "state"
    result = wrap(state, ["--max-retries", "0"], ft_command(tmp_path, str(code)),
                  GROUP_RANK="0")
    assert result.returncode == 3, result.stderr[-3000:]
    (record,) = records(state)
    # ft_launcher's own code: 1, or 0 when rank 0 had already finished (its result is
    # UNHEALTHY all the same: never taken for success) ...
    assert record["exit_code"] == 1 or record["launcher_reported_unhealthy"] is True
    assert record["rank_exit_codes"]["1"] == code  # ... and the rank's, recovered
    assert (record["rule"], record["decision"]) == (rule, decision)
    assert record["exclude_node"] is (code == 16)


@pytest.mark.torch
def test_ft_state_travels_to_the_next_allocation(tmp_path: Path) -> None:
    state, flag = tmp_path / "ckpt" / ".resched", tmp_path / "FINISHED"
    ft_file = tmp_path / "node-local" / "ft_state.json"
    ft_file.parent.mkdir()
    options = ["--ft-state", str(ft_file), "--expect-finished-flag", str(flag)]
    first = wrap(state, options, ft_command(tmp_path, "calibrate"), GROUP_RANK="0",
                 FT_STATE_FILE=str(ft_file))
    assert first.returncode == 0, first.stderr[-3000:]
    (record,) = records(state)
    assert record["nvrx_timeouts"]["heartbeat"]["were_calculated"] is True
    assert "step" in record["nvrx_timeouts"]["section"]["section"]
    carried = json.loads((state / "nvrx" / "ft_state.json").read_text())
    # a new node: its local disk is empty, the checkpoint (with the state dir) came back
    ft_file.unlink()
    flag.unlink()
    second = wrap(state, options, ft_command(tmp_path, "calibrate"), GROUP_RANK="0",
                  FT_STATE_FILE=str(ft_file))
    assert second.returncode == 0, second.stderr[-3000:]
    assert "restored NVRx ft_state" in second.stderr
    assert "rank 0 loaded ft_state" in second.stdout and "rank 1 loaded ft_state" in second.stdout
    assert carried["current_timeouts"]["heartbeat"]["were_calculated"] is True


def test_a_round_killed_then_a_finished_round_is_complete(tmp_path: Path) -> None:
    """ft_launcher restarts the workers after rank 1 is SIGKILLed; the next round runs to
    the end and the launcher reports its worker group SUCCEEDED: the training finished,
    whatever the first round's failure says (`resched classify` on the saved output agrees)."""
    state = tmp_path / "state"
    result = wrap(state, ["--max-retries", "2"], ft_command(tmp_path, "kill-once", max_restarts=1),
                  GROUP_RANK="0", KILLED_ONCE=str(tmp_path / "killed-once"))
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = records(state)
    assert record["decision"] == "complete" and record["in_job_restarts"] == 1
    artifacts = Path(record["artifacts_dir"])
    classified = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "classify", "--exit-code", str(record["exit_code"]),
         "--log", str(artifacts / "stdout.tail.log"), "--log", str(artifacts / "stderr.tail.log"),
         "--format", "json"], cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=60)
    verdict = json.loads(classified.stdout)
    assert (verdict["rule"], verdict["decision"]) == (record["rule"], "complete")
