"""Unit tests of the local executor's pure parts: OSMO rules, chaos specs, tokens, math."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from workflows.backends.local.chaos import ChaosError, Fault, parse_chaos
from workflows.backends.local.plan import LocalOptions, build_plan, substitute_tokens
from workflows.backends.local.report import fault_metrics, run_metrics, summary_line, young_daly
from workflows.backends.local.timeline import Timeline, parse_line
from workflows.errors import SpecError
from workflows.osmo_runtime import exit_decision, group_reaction
from workflows.spec_load import parse_workflow

TASKS = ["master", "worker_1"]

SPEC = """
workflow:
  name: wf
  timeout: {exec_timeout: 90s}
  groups:
  - name: train
    ignoreNonleadStatus: false
    tasks:
    - name: master
      lead: true
      image: nvcr.io/x
      command: ["sh", "-c", "echo {{workflow_id}} {{host:worker_1}} {{output}}"]
      args: ["{{input:0}}"]
      environment: {CK: "{{input:0}}"}
      files:
      - {path: /tmp/run.sh, contents: "cat {{input:0}}/x"}
      inputs: [{url: "file:///tmp/ck/models"}]
      checkpoint: [{path: /tmp/models, url: "file:///tmp/ck", frequency: 1m}]
      exitActions: {RESCHEDULE: "3,16", FAIL: "1-255"}
    - name: worker_1
      command: ["true"]
  - name: post
    tasks:
    - name: eval
      command: ["cat", "{{input:master}}"]
      inputs: [{task: master}]
"""


def plan_of(text: str = SPEC, **options: object):
    spec = parse_workflow(text)
    return build_plan(spec, LocalOptions(**options), run_id="run-1", workdir=Path("/w"),  # type: ignore[arg-type]
                      base_dir=Path("/"))


# -- exitActions (section 5) ----------------------------------------------------------
def test_exit_actions_first_match_then_default() -> None:
    master = plan_of().groups[0].tasks[0].exit_rules
    assert exit_decision(master, 3, retry_id=0, max_retry_per_task=3).action == "RESCHEDULE"
    assert exit_decision(master, 16, retry_id=0, max_retry_per_task=3).action == "RESCHEDULE"
    assert exit_decision(master, 2, retry_id=0, max_retry_per_task=3).matched == "FAIL"
    assert exit_decision(master, 0, retry_id=0, max_retry_per_task=3).action == "COMPLETE"
    assert exit_decision(master, 300, retry_id=0, max_retry_per_task=3).matched is None
    assert exit_decision(master, 300, retry_id=0, max_retry_per_task=3).action == "FAIL"


def test_reschedule_skipped_at_retry_limit_names_osmo_default() -> None:
    master = plan_of().groups[0].tasks[0].exit_rules
    assert exit_decision(master, 3, retry_id=2, max_retry_per_task=3).action == "RESCHEDULE"
    limited = exit_decision(master, 3, retry_id=3, max_retry_per_task=3)
    assert limited.action == "FAIL" and "retry limit 3" in limited.note
    assert "max_retry_per_task is 0" in limited.note
    assert exit_decision(master, 3, retry_id=0, max_retry_per_task=0).action == "FAIL"


# -- groups (section 6) --------------------------------------------------------------
@pytest.mark.parametrize("ignore", [True, False])
def test_lead_reschedule_restarts_everyone(ignore: bool) -> None:
    r = group_reaction(is_lead=True, action="RESCHEDULE", ignore_nonlead_status=ignore)
    assert (r.new_pod, r.restart_others, r.group_status) == (True, True, None)


@pytest.mark.parametrize(("action", "status"), [("COMPLETE", "COMPLETED"), ("FAIL", "FAILED")])
def test_lead_end_gives_its_status_to_the_group(action: str, status: str) -> None:
    r = group_reaction(is_lead=True, action=action, ignore_nonlead_status=True)
    assert r.group_status == status and not r.new_pod


def test_nonlead_reschedule_depends_on_ignore_nonlead_status() -> None:
    alone = group_reaction(is_lead=False, action="RESCHEDULE", ignore_nonlead_status=True)
    assert (alone.new_pod, alone.restart_others) == (True, False)
    reset = group_reaction(is_lead=False, action="RESCHEDULE", ignore_nonlead_status=False)
    assert (reset.new_pod, reset.restart_others) == (True, True)


def test_nonlead_failure_depends_on_ignore_nonlead_status() -> None:
    assert group_reaction(is_lead=False, action="FAIL", ignore_nonlead_status=False).group_status == "FAILED"
    ignored = group_reaction(is_lead=False, action="FAIL", ignore_nonlead_status=True)
    assert ignored.group_status is None and ignored.task_status == "FAILED"
    done = group_reaction(is_lead=False, action="COMPLETE", ignore_nonlead_status=False)
    assert done.group_status is None and done.task_status == "COMPLETED"


# -- plan and tokens -------------------------------------------------------------------
def test_plan_substitutes_tokens_everywhere() -> None:
    plan = plan_of()
    master = plan.groups[0].tasks[0]
    staged = "/w/tasks/master/input/0"
    assert master.argv == ("sh", "-c", "echo run-1 127.0.0.1 /w/tasks/master/output", staged)
    assert dict(master.environment) == {"CK": staged}
    assert master.files[0].data == f"cat {staged}/x".encode()
    assert master.checkpoints[0].upload_url == "file:///tmp/ck/models"
    assert master.checkpoints[0].frequency_s == 60
    eval_task = plan.groups[1].tasks[0]
    assert eval_task.argv == ("cat", "/w/tasks/eval/input/0")
    uuid_spec = SPEC.replace('command: ["true"]', 'command: ["echo", "{{uuid}}", "{{workflow_id}}"]')
    assert plan_of(uuid_spec).groups[0].tasks[1].argv == ("echo", "run-1-worker_1", "run-1")
    assert plan.groups[1].depends_on == ("train",)
    assert plan.exec_timeout_s == 90
    assert any("nvcr.io/x" in note for note in plan.not_emulated)
    text = plan.materialize()
    assert "lead master" in text and "checkpoint /tmp/models -> file:///tmp/ck/models every 60s" in text


def test_groups_run_after_the_groups_they_take_inputs_from() -> None:
    plan = plan_of("""
workflow:
  name: order
  groups:
  - name: evaluate
    tasks:
    - {name: eval, command: ["true"], inputs: [{task: train}]}
  - name: training
    tasks:
    - {name: train, command: ["true"], inputs: [{task: prep}]}
  - name: prepare
    tasks:
    - {name: prep, command: ["true"]}
""")
    assert [g.name for g in plan.groups] == ["prepare", "training", "evaluate"]
    assert plan.groups[2].depends_on == ("training",)


def test_unknown_input_token_is_a_clear_error() -> None:
    with pytest.raises(SpecError, match=r"\{\{input:3\}\} names no input") as info:
        substitute_tokens("{{input:3}}", {"input:0": "/x"}, where="task a")
    assert "task a" in str(info.value)


def test_token_with_spaces_is_left_alone() -> None:
    assert substitute_tokens("{{ output }} {{output}}", {"output": "/o"}, where="t") == "{{ output }} /o"


# -- chaos specs ------------------------------------------------------------------------
def test_chaos_spec_parses_every_kind() -> None:
    plan = parse_chaos("kill:master@20s,hang:worker_1@35s,exit:master=16@50s,term:master@3ckpt,"
                       "podkill:worker-1@1m", TASKS)
    assert plan.faults == (
        Fault("kill", "master", at_s=20.0),
        Fault("hang", "worker_1", at_s=35.0),
        Fault("exit", "master", at_s=50.0, code=16),
        Fault("term", "master", after_ckpt=3),
        Fault("podkill", "worker_1", at_s=60.0),
    )
    assert plan.needs_exit_hook and plan.random is None
    by_step = parse_chaos("kill:master@500step,slow:worker_1=8@1steps", TASKS)
    assert by_step.faults == (Fault("kill", "master", at_step=500),
                              Fault("slow", "worker_1", at_step=1, factor=8.0))
    assert [f.describe() for f in by_step.faults] == ["kill:master@500step", "slow:worker_1=8@1step"]


def test_random_chaos_is_seeded() -> None:
    plan = parse_chaos("random:mtbf=30s,seed=7,kinds=kill+term,max=2", TASKS)
    assert plan.random is not None and plan.random.kinds == ("kill", "term")
    first = [plan.random.next_fault(random.Random(7), 0.0, TASKS) for _ in range(1)]
    again = [plan.random.next_fault(random.Random(7), 0.0, TASKS) for _ in range(1)]
    assert first == again and first[0].kind in ("kill", "term") and first[0].at_s > 0
    mixed = parse_chaos("kill:master@5s,random:mtbf=1m", TASKS)
    assert len(mixed.faults) == 1 and mixed.random is not None and mixed.random.mtbf_s == 60


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("kill:master@20s,boom:master@3s", "'boom:master@3s'"),
        ("kill:nobody@20s", "'kill:nobody@20s'"),
        ("kill:master@soon", "'kill:master@soon'"),
        ("exit:master@5s", "'exit:master@5s'"),
        ("exit:master=300@5s", "'exit:master=300@5s'"),
        ("kill:master=3@5s", "'kill:master=3@5s'"),
        ("kill:master", "'kill:master'"),
        ("random:seed=1", "random:seed=1"),
        ("random:mtbf=10s,speed=2", "speed=2"),
        ("random:mtbf=10s,kinds=kill+nuke", "nuke"),
        ("kill:master@0ckpt", "'kill:master@0ckpt'"),
        ("kill:master@0step", "'kill:master@0step'"),
        ("slow:worker_1=8@-3step", "'slow:worker_1=8@-3step'"),
        ("kill:master@1s,,term:master@2s", "empty item"),
    ],
)
def test_bad_chaos_spec_names_the_bad_item(spec: str, named: str) -> None:
    with pytest.raises(ChaosError) as info:
        parse_chaos(spec, TASKS)
    message = str(info.value)
    assert named in message and "\n" not in message


# -- timeline, metrics and the Young/Daly bound ---------------------------------------
def test_young_daly_model_matches_the_llama3_example() -> None:
    mtbf = 2.78 * 3600
    numbers = young_daly(5.0, wall_s=mtbf, faults=1, detect=0.0, resume=0.0, interval_s=600.0)
    assert numbers["tau_opt_s"] == pytest.approx(math.sqrt(2 * 5 * mtbf), rel=1e-3)
    assert numbers["tau_opt_s"] / 60 == pytest.approx(5.3, abs=0.1)
    assert 1 - numbers["ettr_model_optimal"] == pytest.approx(0.032, abs=0.001)
    assert numbers["model_in_range"] is True  # M = 10008 s >= 10 x (600 s + 0 + 0)
    # every 10 min instead of 5.3: 5/600 + 600/(2 M) = 0.0083 + 0.030
    assert 1 - numbers["ettr_model_used"] == pytest.approx(5 / 600 + 600 / (2 * mtbf), abs=1e-4)
    with_restart = young_daly(5.0, wall_s=mtbf, faults=1, detect=300.0, resume=300.0)
    assert with_restart["ettr_model_optimal"] == pytest.approx(0.908, abs=0.002)
    assert with_restart["ettr_model_used"] is None  # no interval measured: no claim
    # start-up is outside the model: the prediction is scaled by the share after it
    started_late = young_daly(5.0, wall_s=mtbf, faults=1, detect=0.0, resume=0.0, startup_s=mtbf / 10)
    assert started_late["ettr_model_optimal"] == pytest.approx(numbers["ettr_model_optimal"] * 0.9, abs=1e-4)
    assert young_daly(5.0, wall_s=100.0, faults=0, detect=None, resume=None)["ettr_model_optimal"] is None


def _timeline(lines: list[tuple[float, str, str]]) -> Timeline:
    now = [0.0]
    timeline = Timeline(clock=lambda: now[0])
    for t, task, line in lines:
        now[0] = t
        if line.startswith("!"):
            kind, _, rest = line[1:].partition(" ")
            timeline.add(kind, task, **dict(p.split("=") for p in rest.split() if p))
        else:
            parse_line(line, task, timeline, attempt=1)
    return timeline


def test_fault_metrics_follow_one_fault_through_recovery() -> None:
    steps = [(float(s), "master", f"resched-train: step {s} loss 0.1") for s in range(1, 11)]
    timeline = _timeline([
        (0.0, "master", "!run_started"),
        *steps,
        (10.0, "master", "resched-train: checkpoint step 10 save_s 0.5"),
        (10.5, "master", "!fault_injected spec=kill:master@10s"),
        (10.7, "master", 'resched: event failure_detected {"t": 10.7, "signal": 9}'),
        (10.8, "master", 'resched: event decision {"t": 10.8, "decision": "retry", "rule": "killed"}'),
        (11.0, "master", 'resched: event attempt_started {"t": 11.0, "attempt": 2}'),
        (13.0, "master", "resched-train: resumed from step 8"),
        (14.0, "master", "resched-train: step 9 loss 0.1"),
        (15.0, "master", "resched-train: step 10 loss 0.1"),
        (16.0, "master", "resched-train: step 11 loss 0.1"),
        (16.5, None, "!run_ended"),
    ])
    events = timeline.events
    [fault] = fault_metrics(events)
    assert fault["detection_s"] == pytest.approx(0.2)
    assert fault["resume_s"] == pytest.approx(3.3)
    assert (fault["step_before"], fault["restored_step"], fault["lost_steps"]) == (10, 8, 2)
    assert fault["decision"] == "retry" and fault["rule"] == "killed"
    assert fault["t_caught_up"] == 15.0
    metrics = run_metrics(events, [fault], wall_s=16.5)
    assert metrics["step_s"] == 1.0 and metrics["steps"] == 11
    assert metrics["ettr"] == pytest.approx(11 / 16.5, abs=1e-3)
    assert metrics["checkpoint_cost_s"] == 0.5 and metrics["faults"] == 1
    # start-up: run start -> first step minus that step's compute = 0 s
    assert metrics["startup_s"] == 0.0
    assert metrics["ettr_model_optimal"] == pytest.approx(
        1 - (math.sqrt(2 * 0.5 / 16.5) + 3.5 / 16.5), abs=1e-3)
    line = summary_line("COMPLETED", metrics)
    assert line.startswith("COMPLETED in 16s: 1 fault, detection 0.2 s, resume 3.3 s, ETTR 0.67 "
                           "(Young/Daly model ")
    assert "bound" not in line


def test_a_fault_after_an_upload_knows_the_step_the_upload_proved() -> None:
    # A training that prints no step lines (Lightning off a terminal): its steps come
    # from the folder watcher, one look late. An @1ckpt kill fires on the upload itself,
    # before that look: the uploaded step is the step reached before the fault.
    timeline = _timeline([(0.0, "train", "!run_started")])
    timeline.add("checkpoint_uploaded", "train", t=2.0, attempt=1, step=10, seconds=0.1)
    timeline.add("fault_injected", "train", t=2.1, spec="kill:train@1ckpt")
    timeline.add("step", "train", t=2.4, attempt=1, step=10, source="checkpoint-folder")
    timeline.add("checkpoint_uploaded", "other", t=2.05, attempt=1, step=50, seconds=0.1)
    [fault] = fault_metrics(timeline.events)
    assert fault["step_before"] == 10  # another task's upload proves nothing of this one


def test_a_host_token_must_name_a_task_of_the_workflow() -> None:
    with pytest.raises(SpecError, match=r"\{\{host:nobody\}\} names no task of this workflow"):
        plan_of(SPEC.replace("{{host:worker_1}}", "{{host:nobody}}"))
    # another group's task is fine locally (every task is on 127.0.0.1); names compare loosely
    assert "127.0.0.1" in plan_of(SPEC.replace("{{host:worker_1}}", "{{host:EVAL}}")).groups[0].tasks[0].argv[2]
