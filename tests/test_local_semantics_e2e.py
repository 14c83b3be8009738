"""End-to-end OSMO semantics of ``resched run`` with tiny shell workflows (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.local_fixtures import (
    COUNTER_TRAIN,
    RESCHED,
    clean_env,
    processes_with,
    processes_with_env,
    run_local,
    write_workflow,
)

pytestmark = pytest.mark.e2e


def _ctrl_c_when(ready: Callable[[], bool], spec: Path, workdir: Path,
                 *extra: str) -> tuple[subprocess.Popen[str], str, str]:
    """Start ``resched run``, wait (60 s at most) until ``ready()``, then Ctrl-C it; its
    process, stdout and stderr once it has ended."""
    proc = subprocess.Popen([RESCHED, "run", str(spec), "--workdir", str(workdir), *extra,
                             "--progress", "plain"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env())
    deadline = time.monotonic() + 60
    while not ready() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ready()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc, out, err


def test_two_tasks_writing_the_same_tmp_file_do_not_see_each_other(tmp_path: Path) -> None:
    spec = write_workflow(tmp_path, """
        workflow:
          name: private-tmp
          groups:
          - name: g
            ignoreNonleadStatus: false
            tasks:
            - name: a
              lead: true
              command: ["sh", "-c", "sleep 0.5; cat /tmp/run.sh > {{output}}/seen; ls /tmp > {{output}}/ls"]
              files: [{path: /tmp/run.sh, contents: "I am a"}]
            - name: b
              command: ["sh", "-c", "cat /tmp/run.sh > {{output}}/seen; echo b-was-here > /tmp/extra"]
              files: [{path: /tmp/run.sh, contents: "I am b"}]
    """)
    run = run_local(spec, workdir=tmp_path / "work")
    assert run.returncode == 0, run.stderr
    assert (run.workdir / "tasks/a/output/seen").read_text() == "I am a"
    assert (run.workdir / "tasks/b/output/seen").read_text() == "I am b"
    assert "extra" not in (run.workdir / "tasks/a/output/ls").read_text().split()
    assert not Path("/tmp/extra").exists() or Path("/tmp/extra").read_text() != "b-was-here\n"


def test_software_installed_under_tmp_stays_visible_behind_the_private_tmp(
    tmp_path: Path,
) -> None:
    """A checkout and its virtualenv under /tmp (as a CI clone may be) must not vanish
    behind a task's private /tmp: PATH entries, the Python prefix and the current
    directory under /tmp are bound back in."""
    tools = tmp_path / "tools" / "bin"
    tools.mkdir(parents=True)
    tool = tools / "resched-test-tool"
    tool.write_text("#!/bin/sh\necho tool-ran > \"$1\"/seen\n")
    tool.chmod(0o755)
    (tmp_path / "spec").mkdir()
    spec = write_workflow(tmp_path / "spec", """
        workflow:
          name: tools-under-tmp
          tasks:
          - name: a
            command: ["resched-test-tool", "{{output}}"]
    """)
    run = run_local(spec, workdir=tmp_path / "work", path_prefix=tools)
    assert run.returncode == 0, run.stderr
    assert (run.workdir / "tasks/a/output/seen").read_text() == "tool-ran\n"


def test_tokens_are_substituted_in_command_environment_and_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("input-data")
    spec = write_workflow(tmp_path, f"""
        workflow:
          name: tokens
          groups:
          - name: consume
            tasks:
            - name: reader
              command: ["sh", "/tmp/job/read.sh"]
              environment: {{FROM_PRODUCER: "{{{{input:producer}}}}"}}
              files:
              - path: /tmp/job/read.sh
                contents: "cat {{{{input:0}}}}/made.txt $FROM_PRODUCER/made.txt > {{{{output}}}}/got"
              inputs: [{{task: producer}}]
          - name: produce
            tasks:
            - name: producer
              command: ["sh", "-c", "cat {{{{input:0}}}}/in.txt > {{{{output}}}}/made.txt; echo ' {{{{workflow_id}}}} {{{{host:reader}}}}' >> {{{{output}}}}/made.txt"]
              inputs: [{{url: "file://{data}"}}]
    """)
    run = run_local(spec, workdir=tmp_path / "work")
    assert run.returncode == 0, run.stderr
    run_id = run.report["run_id"]
    made = (run.workdir / "tasks/producer/output/made.txt").read_text()
    assert made == f"input-data {run_id} 127.0.0.1\n"
    assert (run.workdir / "tasks/reader/output/got").read_text() == made * 2
    # the consuming group ran after the producing one although it is listed first
    starts = {e["task"]: e["t"] for e in run.events("task_started")}
    assert starts["producer"] < starts["reader"]


def _pair(tmp_path: Path, *, ignore: bool, worker_cmd: str, lead_cmd: str = "sleep 2",
          actions: str = "") -> Path:
    return write_workflow(tmp_path, f"""
        workflow:
          name: pair
          groups:
          - name: g
            ignoreNonleadStatus: {str(ignore).lower()}
            tasks:
            - name: lead
              lead: true
              command: ["sh", "-c", "{lead_cmd}"]
              {actions}
            - name: worker
              command: ["sh", "-c", "{worker_cmd}"]
              {actions}
    """)


def test_nonlead_failure_is_ignored_with_ignore_nonlead_status_true(tmp_path: Path) -> None:
    run = run_local(_pair(tmp_path, ignore=True, worker_cmd="exit 1"), workdir=tmp_path / "w")
    assert run.returncode == 0, run.stderr
    assert run.report["status"] == "COMPLETED"
    [worker] = run.attempts("worker")
    [lead] = run.attempts("lead")
    assert (worker["exit_code"], worker["status"]) == (1, "FAILED")
    assert (lead["exit_code"], lead["status"]) == (0, "COMPLETED")
    assert "non-lead failure ignored" in run.stderr


def test_nonlead_failure_fails_the_group_with_ignore_nonlead_status_false(tmp_path: Path) -> None:
    run = run_local(_pair(tmp_path, ignore=False, worker_cmd="exit 1", lead_cmd="sleep 60"),
                    workdir=tmp_path / "w")
    assert run.returncode == 1
    assert run.report["status"] == "FAILED"
    assert "non-lead failed: the group fails" in run.report["reason"]
    [lead] = run.attempts("lead")
    assert lead["stopped_by_executor"] and lead["status"] == "FAILED"
    assert lead["ended_at"] - lead["started_at"] < 30  # stopped, not waited for
    assert run.stdout.startswith("FAILED in ")


RESCHEDULE_ONCE = "if [ -e {{output}}/once ]; then sleep 1; else touch {{output}}/once; exit 3; fi"
ACTIONS = "exitActions: {RESCHEDULE: 3}"


@pytest.mark.parametrize("ignore", [True, False])
def test_nonlead_reschedule_moves_only_it_or_resets_the_barrier(tmp_path: Path, ignore: bool) -> None:
    spec = _pair(tmp_path, ignore=ignore, worker_cmd=RESCHEDULE_ONCE, lead_cmd="sleep 3", actions=ACTIONS)
    run = run_local(spec, workdir=tmp_path / "w")
    assert run.returncode == 0, run.stderr
    worker = run.attempts("worker")
    assert [(a["retry_id"], a["action"]) for a in worker][:2] == [(0, "RESCHEDULE"), (1, "")] or \
        [(a["retry_id"], a["exit_code"]) for a in worker][:2] == [(0, 3), (1, 0)]
    assert len(run.events("inputs_staged", "worker")) == 0  # no inputs: nothing to stage
    lead = run.attempts("lead")
    if ignore:
        assert len(lead) == 1 and lead[0]["status"] == "COMPLETED"
    else:
        assert [(a["retry_id"], a["status"]) for a in lead] == [(0, "RESTARTING"), (0, "COMPLETED")]
        restarted = run.events("attempt_restarted", "lead")
        assert restarted and restarted[0]["mode"] == "in place"


def test_lead_reschedule_restarts_everyone_and_restages_only_its_inputs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "x").write_text("x")
    spec = write_workflow(tmp_path, f"""
        workflow:
          name: lead-moves
          groups:
          - name: g
            tasks:
            - name: lead
              lead: true
              command: ["sh", "-c", "{RESCHEDULE_ONCE}"]
              inputs: [{{url: "{data}"}}]
              {ACTIONS}
            - name: worker
              command: ["sh", "-c", "sleep 30"]
              inputs: [{{url: "{data}"}}]
    """)
    run = run_local(spec, workdir=tmp_path / "w")
    assert run.returncode == 0, run.stderr
    assert [a["retry_id"] for a in run.attempts("lead")] == [0, 1]
    assert [(a["retry_id"], a["status"]) for a in run.attempts("worker")] == [(0, "RESTARTING"), (0, "COMPLETED")]
    # inputs are downloaded again for the new pod only, not for the sibling restarted in place
    assert [e["retry_id"] for e in run.events("inputs_staged", "lead")] == [0, 1]
    assert [e["retry_id"] for e in run.events("inputs_staged", "worker")] == [0]


def test_reschedule_beyond_the_retry_limit_fails_with_the_reason(tmp_path: Path) -> None:
    spec = write_workflow(tmp_path, f"""
        workflow:
          name: always-reschedule
          tasks:
          - name: flaky
            command: ["sh", "-c", "exit 3"]
            {ACTIONS}
    """)
    run = run_local(spec, "--max-retry-per-task", "2", workdir=tmp_path / "w")
    assert run.returncode == 1
    attempts = run.attempts("flaky")
    assert [(a["retry_id"], a["action"]) for a in attempts] == [
        (0, "RESCHEDULE"), (1, "RESCHEDULE"), (2, "FAIL")]
    assert "retry limit 2 reached" in run.report["reason"]
    assert "OSMO's default pool max_retry_per_task is 0" in run.stderr
    assert run.stdout.startswith("FAILED in ")


def test_exec_timeout_stops_the_group(tmp_path: Path) -> None:
    spec = write_workflow(tmp_path, """
        workflow:
          name: slow
          timeout: {exec_timeout: 2s}
          tasks:
          - name: sleeper
            command: ["sh", "-c", "sleep 300"]
    """)
    started = time.monotonic()
    run = run_local(spec, workdir=tmp_path / "w")
    assert run.returncode == 1
    assert "exec_timeout 2s exceeded" in run.report["reason"]
    assert time.monotonic() - started < 60
    # this run's processes only (a test on another xdist worker may run a sleep too)
    assert not processes_with_env(str(tmp_path / "w"))


def _counter_spec(tmp_path: Path, *, with_input: bool) -> Path:
    ck = tmp_path / "ck"
    inputs = f'inputs: [{{url: "file://{ck}/models"}}]' if with_input else ""
    staged = "{{input:0}}" if with_input else ""
    body = "\n".join("                " + line for line in COUNTER_TRAIN.strip().splitlines())
    return write_workflow(tmp_path, f"""
        workflow:
          name: counter
          tasks:
          - name: train
            command: ["python", "/tmp/job/train.py", "{staged}", "30", "12", "{{{{output}}}}/failed-once"]
            files:
            - path: /tmp/job/train.py
              contents: |
{body}
            {inputs}
            checkpoint: [{{path: /tmp/models, url: "file://{ck}", frequency: 1m}}]
            exitActions: {{RESCHEDULE: 3}}
    """)


@pytest.mark.parametrize("with_input", [True, False])
def test_checkpoint_comes_back_only_through_inputs(tmp_path: Path, with_input: bool) -> None:
    run = run_local(_counter_spec(tmp_path, with_input=with_input), workdir=tmp_path / "w")
    assert run.returncode == 0, run.stderr
    attempts = run.attempts("train")
    assert [a["retry_id"] for a in attempts] == [0, 1]
    # the final upload after exit 3 published step 12 under <url>/models
    assert any(e["step"] == 12 and e["final"] for e in run.events("checkpoint_uploaded"))
    resumed = attempts[1]["resumed_from_step"]
    if with_input:
        assert resumed == 12
    else:
        assert resumed == 0  # the checkpoint was uploaded but never came back
        assert "RS001" in run.stderr  # and lint said so before the run


def test_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    # Durations unique to this run: another run of this test on the same machine (a
    # colleague's checkout) must not be mistaken for our leftovers, nor ours for theirs.
    # The test looks for the detached `sleep` itself, not the `sh` whose command line
    # names it (seen before setsid even ran, that says nothing about the detached child).
    detached, foreground = f"321.{os.getpid()}", f"322.{os.getpid()}"
    spec = write_workflow(tmp_path, f"""
        workflow:
          name: interrupted
          tasks:
          - name: spawner
            command: ["sh", "-c", "setsid sleep {detached} & sleep {foreground}"]
    """)
    report = tmp_path / "r.json"
    proc, out, err = _ctrl_c_when(lambda: bool(sleeping(detached)), spec, tmp_path / "w",
                                  "--report", str(report))
    assert proc.returncode != 0
    assert out.startswith("CANCELED"), err
    assert not processes_with(detached) and not processes_with(foreground)
    assert not processes_with_env(str(tmp_path / "w"))


def test_ctrl_c_gives_a_daemon_that_left_the_group_a_graceful_term(tmp_path: Path) -> None:
    # setsid takes the daemon out of the task's process group: the group's SIGTERM misses
    # it, so the executor sends it one of its own (it used to wait the whole grace, then
    # SIGKILL it: a daemon that saves on TERM lost its save)
    spec = write_workflow(tmp_path, """
        workflow:
          name: interrupted
          tasks:
          - name: spawner
            command: ["sh", "-c", "setsid sh /tmp/job/daemon.sh & sleep 3600"]
            files:
            - path: /tmp/job/daemon.sh
              contents: |
                trap 'echo term > {{output}}/daemon-got-term; exit 0' TERM
                touch {{output}}/daemon-ready
                while :; do sleep 0.05; done
    """)
    output = tmp_path / "w" / "tasks" / "spawner" / "output"
    marker, ready = output / "daemon-got-term", output / "daemon-ready"
    _, out, err = _ctrl_c_when(ready.exists, spec, tmp_path / "w")
    assert out.startswith("CANCELED"), err
    assert marker.read_text() == "term\n"  # it ended on its TERM, not by a SIGKILL
    assert not processes_with_env(str(tmp_path / "w"))


def sleeping(duration: str) -> list[int]:
    """Live `sleep DURATION` processes (the program itself, not a shell naming it)."""
    found = []
    for pid in processes_with(f"sleep {duration}"):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == b"sleep":
            found.append(pid)
    return found


def test_chaos_on_shell_tasks_kill_hang_and_forced_exit(tmp_path: Path) -> None:
    spec = write_workflow(tmp_path, """
        workflow:
          name: chaos-shell
          timeout: {exec_timeout: 60s}
          tasks:
          - name: job
            command: ["sh", "-c", "if [ -e {{output}}/2 ]; then exit 0; fi; if [ -e {{output}}/1 ]; then touch {{output}}/2; else touch {{output}}/1; fi; sleep 100"]
            exitActions: {RESCHEDULE: "137,7"}
    """)
    run = run_local(spec, "--chaos", "podkill:job@1s,exit:job=7@3s", workdir=tmp_path / "w")
    assert run.returncode == 0, run.stderr
    attempts = run.attempts("job")
    assert [(a["exit_code"], a["action"]) for a in attempts] == [
        (137, "RESCHEDULE"), (7, "RESCHEDULE"), (0, "COMPLETE")]
    assert attempts[1]["forced_exit_code"]  # no Python rank: the code is reported, honestly
    faults = run.events("fault_injected")
    assert [f["spec"] for f in faults] == ["podkill:job@1s", "exit:job=7@3s"]
    assert "1 fault" not in run.stdout and "2 faults" in run.stdout


def test_bad_chaos_spec_is_one_line_naming_the_item(tmp_path: Path) -> None:
    spec = write_workflow(tmp_path, """
        workflow:
          name: ok
          tasks:
          - {name: t, command: ["true"]}
    """)
    run = run_local(spec, "--chaos", "kill:t@1s,melt:t@2s", workdir=tmp_path / "w")
    assert run.returncode == 2
    lines = [line for line in run.stderr.splitlines() if line.startswith("resched: error")]
    assert len(lines) == 1 and "'melt:t@2s'" in lines[0] and "Traceback" not in run.stderr


STEPPER = ("if [ -e {{output}}/done ]; then exit 0; fi; i=0; while [ $i -lt 60 ]; do i=$((i+1)); "
           "echo resched-train: step $i; sleep 0.05; done; touch {{output}}/done")


def test_random_chaos_is_reproducible_and_waits_for_progress(tmp_path: Path) -> None:
    spec = write_workflow(tmp_path, f"""
        workflow:
          name: random-chaos
          timeout: {{exec_timeout: 120s}}
          tasks:
          - name: job
            command: ["sh", "-c", "{STEPPER}"]
            exitActions: {{RESCHEDULE: 137}}
    """)
    chaos = ["--chaos", "random:mtbf=1s,seed=5,kinds=podkill,max=2"]
    first = run_local(spec, *chaos, workdir=tmp_path / "w1")
    second = run_local(spec, *chaos, workdir=tmp_path / "w2")
    for run in (first, second):
        assert run.returncode == 0, run.stderr
        faults = run.events("fault_injected")
        assert [f["fault"] for f in faults] == ["podkill", "podkill"]
        steps = run.events("step")
        # each random fault came after a training step seen since the previous one
        for before, fault in zip([0.0] + [f["t"] for f in faults], faults):
            assert any(before < s["t"] < fault["t"] for s in steps)
        assert [a["exit_code"] for a in run.attempts("job")][:2] == [137, 137]


def test_submit_backend_local_runs_the_same_backend(tmp_path: Path) -> None:
    spec = write_workflow(tmp_path, """
        workflow:
          name: via-submit
          tasks:
          - {name: t, command: ["sh", "-c", "echo hi > {{output}}/x"]}
    """)
    env = clean_env()
    dry = subprocess.run([RESCHED, "submit", "--backend", "local", str(spec), "--dry-run",
                          "--workdir", str(tmp_path / "w")], capture_output=True, text=True, env=env,
                         check=False)
    assert dry.returncode == 0, dry.stderr
    assert "lead t: sh -c echo hi > " in dry.stdout and not (tmp_path / "w").exists()
    done = subprocess.run([RESCHED, "submit", "--backend", "local", str(spec), "--workdir",
                           str(tmp_path / "w"), "--max-retry-per-task", "1", "--report",
                           str(tmp_path / "r.json")], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("COMPLETED in ")
    assert (tmp_path / "w/tasks/t/output/x").read_text() == "hi\n"
    assert (tmp_path / "r.json").exists()


def test_hang_without_a_wrapper_is_caught_by_exec_timeout_and_term_preempts(tmp_path: Path) -> None:
    hung = write_workflow(tmp_path, """
        workflow:
          name: hung
          timeout: {exec_timeout: 4s}
          tasks:
          - {name: job, command: ["sh", "-c", "sleep 100"]}
    """, name="hung.yaml")
    run = run_local(hung, "--chaos", "hang:job@1s", workdir=tmp_path / "w1")
    assert run.returncode == 1 and "exec_timeout 4s exceeded" in run.report["reason"]
    assert run.events("fault_injected")[0]["detail"].startswith("SIGSTOP")
    assert not processes_with_env(str(tmp_path / "w1"))  # a stopped process is still stopped for good
    preempted = write_workflow(tmp_path, """
        workflow:
          name: preempted
          tasks:
          - name: job
            command: ["sh", "-c", "if [ -e {{output}}/x ]; then exit 0; fi; touch {{output}}/x; sleep 100"]
            exitActions: {RESCHEDULE: 143}
    """, name="pre.yaml")
    run = run_local(preempted, "--chaos", "term:job@1s", workdir=tmp_path / "w2")
    assert run.returncode == 0, run.stderr
    assert [(a["exit_code"], a["action"]) for a in run.attempts("job")] == [(143, "RESCHEDULE"), (0, "COMPLETE")]
