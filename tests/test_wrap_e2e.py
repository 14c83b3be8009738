"""`resched wrap` end to end: real processes, the real rule catalogue, policy and history."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.supervise_fixtures import (
    REPO,
    assert_group_gone,
    child_env,
    pid_alive,
    wait_for_file,
    write_script,
)

pytestmark = pytest.mark.e2e


def wrap_argv(state: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(state),
            "--node", "node-a", "--grace", "2", *options]


def run_wrap(state: Path, options: list[str], command: list[str], *,
             env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*wrap_argv(state, *options), "--", *command], check=False, cwd=REPO,
                          env=env or child_env(), capture_output=True, text=True, timeout=timeout)


def records(state: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((state / "attempts").glob("*.json"))]


def decision_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("resched: rule ")]


def test_retry_then_success(tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    script = write_script(tmp_path / "train.sh", (
        "#!/bin/bash\necho 'step 1'\n"
        f"if [ ! -e {marker} ]; then touch {marker}; "
        "echo 'RuntimeError: transient glitch' >&2; exit 1; fi\necho 'done'\n"
    ))
    result = run_wrap(tmp_path / "state", [], [str(script)])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "step 1\nstep 1\ndone\n"  # the command's output, untouched
    first, second = records(tmp_path / "state")
    assert (first["decision"], first["exit_code"], second["decision"]) == ("retry", 1, "complete")
    assert first["allocation"] == second["allocation"]
    events = [line.split()[2] for line in result.stderr.splitlines()
              if line.startswith("resched: event ")]
    assert events == ["attempt_started", "failure_detected", "decision",
                      "attempt_started", "decision"]


def test_budget_exhaustion_escalates_to_reschedule_then_abort_across_runs(tmp_path: Path) -> None:
    state = tmp_path / "state"
    options = ["--max-retries", "1", "--max-reschedules", "1"]
    failing = ["sh", "-c", "echo 'something odd happened' >&2; exit 1"]
    first_run = run_wrap(state, options, failing)
    assert first_run.returncode == 3, first_run.stderr  # retry once, then reschedule
    assert [r["decision"] for r in records(state)] == ["retry", "reschedule"]
    # the orchestrator honours the exclusion (node-a failed twice): the next run is elsewhere
    second_run = run_wrap(state, [*options, "--node", "node-b"], failing)
    assert second_run.returncode == 1, second_run.stderr  # reschedule budget spent: abort
    history = records(state)
    # The fallback rule escalates after two occurrences, so the new allocation does not
    # retry again: the reschedule budget is spent, so it aborts.
    assert [r["decision"] for r in history] == ["retry", "reschedule", "abort"]
    assert [r["attempt"] for r in history] == [1, 2, 3]
    assert history[1]["allocation"] != history[2]["allocation"]
    assert history[-1]["reschedules_left"] == 0
    assert history[1]["exclude_node"] is True  # node-a failed the task twice
    assert (history[-1]["node"], history[-1]["exclude_node"]) == ("node-b", False)
    assert "reschedule budget used up" in history[-1]["reason"]


def test_preemption_of_the_wrapper_spends_no_budget(tmp_path: Path) -> None:
    state = tmp_path / "state"
    ready = tmp_path / "ready"
    script = write_script(tmp_path / "train.sh", (
        "#!/bin/bash\n"
        "trap 'echo \"Received SIGTERM, saving checkpoint\"; exit 0' TERM\n"
        f"echo $$ > {ready}\nwhile true; do sleep 0.1; done\n"
    ))
    wrapper = subprocess.Popen([*wrap_argv(state, "--max-reschedules", "2"), "--", str(script)],
                               cwd=REPO, env=child_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_for_file(ready)
    wrapper.send_signal(signal.SIGTERM)
    _, stderr = wrapper.communicate(timeout=60)
    assert wrapper.returncode == 3, stderr
    preempted = records(state)[-1]
    assert (preempted["rule"], preempted["counts_as_failure"]) == ("preempted", False)
    assert preempted["stop_signal"] == "SIGTERM"
    assert preempted["reschedules_left"] == 2
    failing = run_wrap(state, ["--max-retries", "0", "--max-reschedules", "2"],
                       ["sh", "-c", "exit 1"])
    assert failing.returncode == 3
    assert records(state)[-1]["reschedules_left"] == 1  # only the real failure was counted


def test_wrapper_sigterm_forwards_waits_grace_kills_and_records(tmp_path: Path) -> None:
    state, outcome = tmp_path / "state", tmp_path / "final.json"
    script = write_script(tmp_path / "train.sh", (
        "#!/bin/bash\n"
        f"bash -c 'trap \"\" TERM; echo $$ > {tmp_path}/stubborn.pid; "
        f"while true; do echo x >> {tmp_path}/alive; sleep 0.1; done' &\n"
        f"echo $$ > {tmp_path}/pgid\nwait\n"
    ))
    env = child_env(RESCHED_OUTCOME_FILE=str(outcome))
    wrapper = subprocess.Popen([*wrap_argv(state), "--", str(script)], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pgid = int(wait_for_file(tmp_path / "pgid"))
    stubborn = int(wait_for_file(tmp_path / "stubborn.pid"))
    wait_for_file(tmp_path / "alive")
    beats_at_sigterm = len((tmp_path / "alive").read_text().split())
    wrapper.send_signal(signal.SIGTERM)
    _, stderr = wrapper.communicate(timeout=60)
    assert wrapper.returncode == 3, stderr
    beats_after = len((tmp_path / "alive").read_text().split()) - beats_at_sigterm
    assert beats_after > 1  # the stubborn grandchild lived through its grace period ...
    assert not pid_alive(stubborn)  # ... and was killed after it
    assert_group_gone(pgid)
    final = json.loads(outcome.read_text())
    assert (final["decision"], final["wrapper_exit_code"], final["stop_signal"]) == (
        "reschedule", 3, "SIGTERM")


def test_history_is_carried_across_two_wrapper_runs(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert run_wrap(state, ["--max-retries", "0"], ["sh", "-c", "exit 1"]).returncode == 3
    assert run_wrap(state, [], ["true"]).returncode == 0
    history = json.loads((state / "history.json").read_text())
    attempts = history["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert [a["decision"] for a in attempts] == ["reschedule", "complete"]
    assert attempts[0]["allocation"] != attempts[1]["allocation"]
    assert history["node_failures"] == {"node-a": 1}


def test_command_not_found(tmp_path: Path) -> None:
    outcome = tmp_path / "final.json"
    result = run_wrap(tmp_path / "state", ["--outcome-file", str(outcome)],
                      ["resched-no-such-command-xyz", "--arg"])
    assert result.returncode == 1  # the abort code: a user error, never retried, never 0
    assert "resched: error: command not found: resched-no-such-command-xyz" in result.stderr
    final = json.loads(outcome.read_text())
    assert (final["rule"], final["decision"], final["exit_code"]) == ("command-not-found", "abort", 127)


def test_hang_is_killed_classified_and_retried(tmp_path: Path) -> None:
    marker = tmp_path / "hung-once"
    script = write_script(tmp_path / "train.sh", (
        "#!/bin/bash\necho 'step 1'\n"
        f"if [ ! -e {marker} ]; then touch {marker}; sleep 600; fi\necho done\n"
    ))
    result = run_wrap(tmp_path / "state", ["--hang-timeout", "1", "--grace", "1"], [str(script)])
    assert result.returncode == 0, result.stderr
    first, second = records(tmp_path / "state")
    assert (first["hung"], first["rule"], first["category"], first["decision"]) == (
        True, "hang-detected", "hang", "retry")
    assert first["signal"] == signal.SIGTERM
    assert second["decision"] == "complete"
    assert '"kind": "hang"' in result.stderr


def test_quiet_start_up_gets_its_allowance_then_the_step_timeout_applies(tmp_path: Path) -> None:
    # silent for 2 s before the first step (imports, rendezvous), under a 1 s step timeout
    marker = tmp_path / "hung-once"
    script = write_script(tmp_path / "train.sh", (
        "#!/bin/bash\nsleep 2\necho 'step 1'\n"
        f"if [ ! -e {marker} ]; then touch {marker}; sleep 600; fi\necho done\n"
    ))
    result = run_wrap(tmp_path / "state", ["--hang-timeout", "1,startup=60", "--grace", "1"],
                      [str(script)])
    assert result.returncode == 0, result.stderr
    first, second = records(tmp_path / "state")
    # the start-up was not a hang; the stop after step 1 was, and was retried at once
    assert (first["hung"], first["decision"], first["backoff_s"]) == (True, "retry", 0.0)
    assert second["decision"] == "complete"


def test_exit_zero_without_the_finished_flag_is_not_complete(tmp_path: Path) -> None:
    flag = tmp_path / "FINISHED"
    result = run_wrap(tmp_path / "state", ["--expect-finished-flag", str(flag)], ["true"])
    assert result.returncode == 3
    assert records(tmp_path / "state")[-1]["rule"] == "graceful-stop-unfinished"
    flag.write_text("")
    assert run_wrap(tmp_path / "state", ["--expect-finished-flag", str(flag)], ["true"]).returncode == 0


def test_exit_zero_after_a_logged_error_is_retried_once_then_aborted(tmp_path: Path) -> None:
    # a CLI that catches its trainer's failure, logs it at ERROR and returns 0
    program = "import logging; logging.basicConfig(); logging.error('unsupported model type')"
    result = run_wrap(tmp_path / "state", [], [sys.executable, "-c", program])
    assert result.returncode != 0, result.stderr
    first, second = records(tmp_path / "state")
    assert (first["exit_code"], first["rule"], first["decision"]) == (0, "error-logged-at-exit-0", "retry")
    assert (second["rule"], second["decision"]) == ("error-logged-at-exit-0", "abort")
    # the same program without the error record is complete on its first exit
    clean = run_wrap(tmp_path / "clean", [], [sys.executable, "-c", "print('done')"])
    assert clean.returncode == 0 and records(tmp_path / "clean")[-1]["decision"] == "complete"


def test_env_defaults_and_flags_winning(tmp_path: Path) -> None:
    env = child_env(RESCHED_RESCHEDULE_CODE="42", RESCHED_MAX_RETRIES="0")
    result = run_wrap(tmp_path / "s1", [], ["sh", "-c", "exit 1"], env=env)
    assert result.returncode == 42
    result = run_wrap(tmp_path / "s2", ["--reschedule-code", "5"], ["sh", "-c", "exit 1"], env=env)
    assert result.returncode == 5


def test_same_reschedule_and_abort_code_is_a_one_line_usage_error(tmp_path: Path) -> None:
    result = run_wrap(tmp_path / "state", ["--reschedule-code", "1"], ["true"])
    assert result.returncode not in (0, 1)
    assert result.stderr.count("\n") == 1 and "both 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_stdout_of_a_fast_producer_is_complete_and_in_order(tmp_path: Path) -> None:
    program = "import sys\nfor i in range(200000):\n    sys.stdout.write(f'line {i}\\n')\n"
    result = run_wrap(tmp_path / "state", [], [sys.executable, "-c", program])
    assert result.returncode == 0
    assert result.stdout == "".join(f"line {i}\n" for i in range(200000))


@pytest.mark.torch
def test_torchrun_rank_exit_16_reschedules_and_marks_the_node(tmp_path: Path) -> None:
    train = tmp_path / "train.py"
    train.write_text(
        "import os, sys, time\nimport torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "dist.barrier()\n"
        "if dist.get_rank() == 1:\n"
        "    print('validation result differs; Saving a checkpoint and exiting now', flush=True)\n"
        "    sys.exit(16)\n"
        "time.sleep(120)\n"
    )
    outcome = tmp_path / "final.json"
    env = child_env(RESCHED_OUTCOME_FILE=str(outcome), OMP_NUM_THREADS="1")
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    result = run_wrap(tmp_path / "state", [],
                      [torchrun, "--standalone", "--nproc-per-node", "2", str(train)],
                      env=env, timeout=240)
    assert result.returncode == 3, result.stderr
    final = json.loads(outcome.read_text())
    assert final["exit_code"] == 1  # what torchrun itself reported
    assert final["launcher"] == "torchrun"
    assert final["rank_exit_codes"].get("1") == 16
    assert final["root_cause_rank"] == 1
    assert (final["rule"], final["decision"], final["exclude_node"]) == (
        "megatron-rerun-16", "reschedule", True)
    assert "rank 1 exit 16 (hidden by torchrun)" in result.stderr
    assert "node node-a marked for exclusion" in result.stderr
    assert os.path.isdir(final["artifacts_dir"])
    # The record names the `resched classify` call that explains it from the saved tails.
    argv = shlex.split(final["explain_command"])
    assert argv[:2] == ["resched", "classify"]
    explained = subprocess.run([sys.executable, "-m", "workflows.cli", *argv[1:], "--format", "json"],
                               cwd=REPO, env=child_env(), capture_output=True, text=True,
                               check=False, timeout=60)
    assert explained.returncode == 0, explained.stderr
    diagnosis = json.loads(explained.stdout)
    assert (diagnosis["rule"], diagnosis["decision"]) == ("megatron-rerun-16", "reschedule")


@pytest.mark.torch
def test_ft_launcher_in_job_restarts_are_one_attempt_not_several(tmp_path: Path) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import os, sys, time\n"
        "rank, restart = os.environ['RANK'], os.environ['TORCHELASTIC_RESTART_COUNT']\n"
        "print(f'rank {rank} restart {restart}', flush=True)\n"
        "if rank == '1':\n    time.sleep(0.3)\n    sys.exit(1)\n"
        "time.sleep(120)\n"
    )
    ft_launcher = str(Path(sys.executable).with_name("ft_launcher"))
    state = tmp_path / "state"
    result = run_wrap(state, ["--max-retries", "0"],
                      [ft_launcher, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                       str(worker)], timeout=240)
    assert result.returncode == 3, result.stderr
    for line in ("rank 1 restart 0", "rank 1 restart 1"):
        assert line in result.stdout  # its workers' output passes through
    assert "will restart worker group" in result.stderr  # and its own log lines too
    (only,) = records(state)  # one wrapper attempt, however often ft_launcher restarted
    assert (only["launcher"], only["in_job_restarts"], only["exit_code"]) == ("ft_launcher", 1, 1)
    assert only["decision"] == "reschedule"
    assert (Path(only["artifacts_dir"]) / "launcher-logs").is_dir()  # PET_LOG_DIR honoured


def _checkpointing_program(directory: Path, step: int, code: int, *, expect: str = "") -> str:
    return (
        "import os, sys\nfrom pathlib import Path\n"
        "from wrapper.checkpoint.marker import mark_complete, read_marker\n"
        f"d = Path({str(directory)!r})\n"
        f"if {expect!r}:\n    assert (d / 'model.bin').read_text() == {expect!r}, 'not restored'\n"
        "    print('resumed from step', read_marker(d))\n"
        f"(d / 'model.tmp').write_text('weights at {step}')\n"
        "os.replace(d / 'model.tmp', d / 'model.bin')\n"
        f"mark_complete(d, {step})\n"
        f"sys.exit({code})\n"
    )


@pytest.mark.parametrize("sync_every", [None, "1"])
def test_checkpoint_url_restores_publishes_and_carries_history(
    tmp_path: Path, sync_every: str | None
) -> None:
    store = f"file://{tmp_path}/store"
    first_dir, second_dir = tmp_path / "node-a-ckpt", tmp_path / "node-b-ckpt"
    sync = ["--sync-every", sync_every] if sync_every else []
    first = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--checkpoint-dir", str(first_dir),
         "--checkpoint-url", store, "--node", "node-a", "--max-retries", "0", *sync, "--",
         sys.executable, "-c", _checkpointing_program(first_dir, 5, 1)],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    assert first.returncode == 3, first.stderr
    second = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--checkpoint-dir", str(second_dir),
         "--checkpoint-url", store, "--node", "node-b", *sync, "--",
         sys.executable, "-c", _checkpointing_program(second_dir, 9, 0, expect="weights at 5")],
        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    assert second.returncode == 0, second.stderr
    assert "resumed from step 5" in second.stdout
    assert "resched: event checkpoint_restored" in second.stderr
    history = json.loads((second_dir / ".resched" / "history.json").read_text())
    attempts = history["attempts"]
    assert [(a["node"], a["attempt"], a["decision"]) for a in attempts] == [
        ("node-a", 1, "reschedule"), ("node-b", 2, "complete")]
    assert attempts[1]["checkpoint_step_before"] == 5
    assert attempts[1]["checkpoint_step_after"] == 9
    # The final publish before exit sent step 9 together with the updated history.
    from wrapper.checkpoint.store import CheckpointStore

    third_dir = tmp_path / "node-c-ckpt"
    restored = CheckpointStore(store).restore(third_dir)
    assert restored is not None and restored.step == 9
    carried = json.loads((third_dir / ".resched" / "history.json").read_text())
    assert len(carried["attempts"]) == 2


def test_auto_hang_timeout_is_calibrated_and_carried_to_the_next_run(tmp_path: Path) -> None:
    state = tmp_path / "state"
    program = ("import time\nfrom wrapper import heartbeat\n"
               "for _ in range(8):\n    heartbeat(); time.sleep(0.05)\n")
    env = child_env(RESCHED_HEARTBEAT_MIN_INTERVAL="0")
    first = run_wrap(state, ["--hang-timeout", "auto"], [sys.executable, "-c", program], env=env)
    assert first.returncode == 0, first.stderr
    measured = records(state)[-1]
    assert measured["hang_timeout_s"] == 300.0  # the measuring attempt keeps the generous value
    assert measured["calibrated_hang_timeout"] == 30.0  # 5 x ~0.05 s, raised to the floor
    second = run_wrap(state, ["--hang-timeout", "auto"], [sys.executable, "-c", program], env=env)
    assert second.returncode == 0, second.stderr
    assert records(state)[-1]["hang_timeout_s"] == 30.0  # carried through the history


def test_a_bad_rules_file_is_one_line_and_never_the_reschedule_code(tmp_path: Path) -> None:
    rules = tmp_path / "team-rules.yaml"
    rules.write_text("version: 1\nrules:\n  - id: team/x\n    decision: sometimes\n")
    result = run_wrap(tmp_path / "state", ["--rules", str(rules), "--reschedule-code", "2"],
                      ["true"])
    assert result.returncode not in (0, 2)
    assert result.stderr.startswith("resched: error: ") and result.stderr.count("\n") == 1
    assert "team-rules.yaml" in result.stderr and "team/x" in result.stderr


@pytest.mark.torch
@pytest.mark.slow
def test_example_training_transient_nccl_error_is_retried_in_place_and_resumes(
    tmp_path: Path,
) -> None:
    checkpoints, outcome = tmp_path / "ckpt", tmp_path / "final.json"
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    train = [torchrun, "--standalone", "--nproc-per-node", "2", str(REPO / "examples" / "ddp_train.py"),
             "--checkpoint-dir", str(checkpoints), "--steps", "20", "--checkpoint-every", "5",
             "--step-time", "0", "--fault", "nccl", "--fail-at-step", "12", "--fail-rank", "1",
             "--fail-once-file", str(tmp_path / "fired-once")]
    env = child_env(RESCHED_OUTCOME_FILE=str(outcome), OMP_NUM_THREADS="1")
    result = run_wrap(tmp_path / "state",
                      ["--checkpoint-dir", str(checkpoints),
                       "--expect-finished-flag", str(checkpoints / "FINISHED")],
                      train, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = records(tmp_path / "state")
    assert (first["rule"], first["decision"], first["exclude_node"]) == ("nccl-error", "retry", False)
    # rank 1 raised; torchrun may SIGTERM it while it exits (-15): its error file decides
    assert first["rank_exit_codes"].get("1") in (1, -15) and first["root_cause_rank"] == 1
    assert first["checkpoint_step_after"] == 10  # the last complete checkpoint before step 12
    assert second["checkpoint_step_before"] == 10 and second["checkpoint_step_after"] == 20
    assert (second["rule"], second["decision"]) == ("complete-finished", "complete")
    assert "resched-train: final checksum" in result.stdout
    assert json.loads(outcome.read_text())["wrapper_exit_code"] == 0


def test_a_closed_stdout_never_kills_the_training(tmp_path: Path) -> None:
    done = tmp_path / "done"
    program = (f"for i in $(seq 50000); do echo line $i; done; echo finished > {done}")
    wrapper = subprocess.Popen([*wrap_argv(tmp_path / "state"), "--", "bash", "-c", program],
                               cwd=REPO, env=child_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert wrapper.stdout is not None
    assert wrapper.stdout.readline() == b"line 1\n"
    wrapper.stdout.close()  # like `resched wrap -- train | head -1`
    _, stderr = wrapper.communicate(timeout=60)
    assert wrapper.returncode == 0, stderr
    assert done.read_text() == "finished\n"  # the command ran to its end (no SIGPIPE)


def test_sigterm_during_the_retry_backoff_leaves_as_a_preemption(tmp_path: Path) -> None:
    outcome = tmp_path / "final.json"
    # the first in-place retry starts at once; the second one waits the backoff (60 s).
    # The second attempt's record is written before that wait: poll for it, no pipes.
    state = tmp_path / "state"
    wrapper = subprocess.Popen([*wrap_argv(state), "--backoff", "60,jitter=0",
                                "--", "sh", "-c", "exit 1"],
                               cwd=REPO, env=child_env(RESCHED_OUTCOME_FILE=str(outcome)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_file(state / "attempts" / "attempt-0002.node-a.json", timeout=60)
    wrapper.send_signal(signal.SIGTERM)  # while it waits the backoff
    assert wrapper.wait(timeout=30) == 3
    final = json.loads(outcome.read_text())
    assert (final["decision"], final["stop_signal"]) == ("reschedule", "SIGTERM")
    assert len(records(tmp_path / "state")) == 2  # no third attempt was started
