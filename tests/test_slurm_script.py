"""The Slurm backend's dry run, without a cluster: golden sbatch scripts and the pieces.

Goldens: ``tests/golden/sbatch/*.sbatch`` hold ``SlurmRequest.materialize()`` exactly,
except the content hash in the submission dir name (it changes with the template's
train.py). Regenerate with ``RESCHED_UPDATE_GOLDEN=1`` and review the diff. The bash
pieces (quoting, exitActions) are checked by running them in a real bash.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from workflows.backends.slurm import SlurmBackend, SlurmRequest
from workflows.backends.slurm.jobside import materialize, substitute_tokens
from workflows.backends.slurm.script import exit_action_function, slurm_time
from workflows.backends.slurm.status import read_job_status
from workflows.backends.slurm.tasks import TokenMap, shell_word
from workflows.errors import BackendError, UsageError
from workflows.osmo_runtime import TOKEN, InputKind, InputRule
from workflows.pipeline import load_workflow
from workflows.spec import Task
from workflows.values import ValueOptions

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden" / "sbatch"
HASH = re.compile(r"(submissions/[A-Za-z0-9_-]+?-)[0-9a-f]{12}")

FEATURES = """\
workflow:
  name: features
  timeout:
    exec_timeout: 90m
  groups:
  - name: pair
    ignoreNonleadStatus: true
    tasks:
    - name: lead-task
      lead: true
      command: ["python3", "/tmp/job/main.py"]
      args: ["--peer", "{{host:helper_1}}", "--out", "{{output}}", "--id", "{{workflow_id}}", "it's $HOME"]
      environment:
        DATA: "{{input:0}}/shard"
        LITERAL: 'a "quoted" `tick` $x'
      files:
      - path: /tmp/job/main.py
        contents: |
          print("peer is {{host:helper_1}}, data in {{input:0}}")
      - path: /tmp/job/blob.bin
        contents: AAEC
        base64: true
      inputs:
      - url: s3://bucket/data
      outputs:
      - url: s3://bucket/results
      checkpoint:
      - path: /tmp/state
        url: s3://bucket/ck
        frequency: 2m
      exitActions:
        COMPLETE: "0"
        RESCHEDULE: 3,16-17
        FAIL: 1-255
    - name: helper_1
      command: ["sleep", "infinity"]
  - name: single
    tasks:
    - name: solo
      command: ["true"]
"""


def dry_run(path: Path, sets: tuple[str, ...] = (), **options: object) -> SlurmRequest:
    job = load_workflow(path, ValueOptions(sets=sets), lint_target="slurm")
    return SlurmBackend().dry_run(job, options)


def check_golden(name: str, text: str) -> None:
    text = HASH.sub(r"\1HASH", text)
    path = GOLDEN / name
    if os.environ.get("RESCHED_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs (RESCHED_UPDATE_GOLDEN=1 to regenerate)"


def test_golden_shipped_multi_node_template() -> None:
    request = dry_run(
        REPO / "templates" / "multi-node-torchrun.yaml",
        ("upload_location=s3://team/run7",),
        workdir="/shared/resched",
        tasks_per_node=2,
        partition="debug",
        time="01:00:00",
        grace=120,
    )
    check_golden("multi-node-torchrun.sbatch", request.materialize())
    assert request.argv[0:2] == ("sbatch", "--parsable")


def test_golden_features(tmp_path: Path) -> None:
    (tmp_path / "wf.yaml").write_text(FEATURES)
    request = dry_run(
        tmp_path / "wf.yaml", workdir="/shared/resched", max_retry_per_task=1, grace_signal="TERM"
    )
    assert [job.group for job in request.jobs] == ["pair", "single"]
    check_golden("features.sbatch", request.materialize())


def test_generated_scripts_are_valid_bash(tmp_path: Path) -> None:
    (tmp_path / "wf.yaml").write_text(FEATURES)
    for request in (
        dry_run(tmp_path / "wf.yaml", workdir=str(tmp_path)),
        dry_run(REPO / "templates" / "multi-node-torchrun.yaml", workdir=str(tmp_path)),
    ):
        for job in request.jobs:
            done = subprocess.run(
                ["bash", "-n"], input=job.script, capture_output=True, text=True, check=False
            )
            assert done.returncode == 0, done.stderr


def test_write_lays_out_scripts_files_and_argv(tmp_path: Path) -> None:
    (tmp_path / "wf.yaml").write_text(FEATURES)
    request = dry_run(tmp_path / "wf.yaml", workdir="/shared/resched")
    written = request.write(tmp_path / "out")
    names = {p.relative_to(tmp_path / "out").as_posix() for p in written}
    assert "sbatch-argv.txt" in names
    blob = next(p for p in written if p.name == "blob.bin")
    assert blob.read_bytes() == b"\x00\x01\x02"  # base64 decoded
    script = next(p for p in written if p.name == "features-pair.sbatch")
    assert script.read_text() == request.jobs[0].script and os.access(script, os.X_OK)
    argv_lines = (tmp_path / "out" / "sbatch-argv.txt").read_text().splitlines()
    assert argv_lines == [" ".join(job.argv) for job in request.jobs]


TOKENS = TokenMap(group_tasks=("master", "worker_1"),
                  inputs=(InputRule(0, InputKind.URL, "s3://b/x", None),), where="test")


@given(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        max_size=40,
    )
)
@settings(max_examples=60, deadline=None)
def test_shell_word_survives_bash_exactly(text: str) -> None:
    full = text + " {{host:worker_1}} {{workflow_id}}"
    # Text that runs into the appended tokens makes another token (e.g. "{{host:" + ...
    # reads as {{host: {{host:worker_1}}): OSMO would read it so too; not this test's case.
    assume(TOKEN.findall(full) == ["host:worker_1", "workflow_id"])
    word = shell_word(full, TOKENS)
    env = {"PATH": os.environ["PATH"], "RESCHED_HOST_WORKER_1": "10.0.0.7", "SLURM_JOB_ID": "42"}
    done = subprocess.run(
        ["bash", "-c", f"printf %s {word}"], env=env, capture_output=True, check=True
    )
    assert done.stdout.decode() == text + " 10.0.0.7 42"


def test_token_errors_name_the_problem() -> None:
    with pytest.raises(BackendError, match="names no task of this group"):
        shell_word("{{host:elsewhere}}", TOKENS)
    with pytest.raises(BackendError, match=r"has 1 input\(s\)"):
        shell_word("{{input:3}}", TOKENS)
    with pytest.raises(BackendError, match="none from task master"):
        shell_word("{{input:master}}", TOKENS)


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (("path: /tmp/job/main.py", "path: /workspace/main.py"), "outside /tmp"),
        (
            (
                "frequency: 2m",
                "frequency: 2m\n      - path: /tmp/b\n        url: s3://b\n        frequency: 1m",
            ),
            "2 checkpoint entries",
        ),
        (("- url: s3://bucket/data", "- task: helper_1"), "of its own group"),
    ],
)
def test_unsupported_specs_fail_with_one_line(
    tmp_path: Path, mutation: tuple[str, str], message: str
) -> None:
    (tmp_path / "wf.yaml").write_text(FEATURES.replace(*mutation))
    with pytest.raises(BackendError, match=message) as caught:
        dry_run(tmp_path / "wf.yaml", workdir="/w")
    assert "\n" not in str(caught.value) and "fix:" in str(caught.value)


def test_task_inputs_become_afterok_dependencies(tmp_path: Path) -> None:
    """OSMO orders ``task:`` inputs; on Slurm the upstream group's job comes first and the
    downstream one is submitted with --dependency=afterok on it and stages its outputs."""
    (tmp_path / "wf.yaml").write_text(FEATURES.replace("- url: s3://bucket/data", "- task: solo\n        regex: '\\.txt$'"))
    request = dry_run(tmp_path / "wf.yaml", workdir="/w")
    assert [job.group for job in request.jobs] == ["single", "pair"]  # upstream first
    pair = request.jobs[1]
    assert pair.after == ("single",) and request.jobs[0].after == ()
    assert pair.argv_with({"single": "41"})[:5] == (
        "sbatch", "--parsable", "--dependency=afterok:41", "--kill-on-invalid-dep=yes",
        "--export=ALL,RESCHED_JOB_OF_SINGLE=41")
    assert "--dependency=afterok:<job of single>" in request.materialize()
    assert ('stage_task_input lead-task 0 "$WORKDIR/${RESCHED_JOB_OF_SINGLE:?set by resched submit}'
            "/outputs/solo\" '\\.txt$' || return 1") in pair.script
    # {{input:0}} still names that input; {{input:solo}} too (written as the index)
    assert '"${RESCHED_TASK_DIR}/input/0/shard"' in pair.script


def test_a_cycle_in_task_inputs_is_one_line_before_anything_is_written(tmp_path: Path) -> None:
    cyclic = FEATURES.replace("- url: s3://bucket/data", "- task: solo").replace(
        '    - name: solo\n      command: ["true"]',
        '    - name: solo\n      command: ["true"]\n      inputs: [{task: lead-task}]')
    (tmp_path / "wf.yaml").write_text(cyclic)
    with pytest.raises(BackendError, match="cycle: group pair -> single -> pair") as caught:
        dry_run(tmp_path / "wf.yaml", workdir=str(tmp_path / "w"))
    assert "\n" not in str(caught.value) and "inputs[0]" in str(caught.value)
    assert not (tmp_path / "w").exists()


def test_bad_grace_signal_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "wf.yaml").write_text(FEATURES)
    with pytest.raises(UsageError, match=r"--grace-signal 'KILL' is not valid .* use one of: USR1, USR2, TERM, INT"):
        dry_run(tmp_path / "wf.yaml", workdir="/w", grace_signal="KILL")


EXIT_TASK = Task(
    name="t", command=("x",), exitActions={"COMPLETE": "0", "RESCHEDULE": "3,16-17", "FAIL": "1-20"}
)


@given(st.integers(min_value=0, max_value=300))
@settings(max_examples=40, deadline=None)
def test_bash_exit_actions_match_the_spec(code: int) -> None:
    function = "\n".join(exit_action_function((EXIT_TASK,)))
    done = subprocess.run(
        ["bash", "-c", f"{function}\nexit_action t {code}"],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = EXIT_TASK.exit_action(code) or ("COMPLETE" if code == 0 else "FAIL")
    assert done.stdout.strip() == expected


def test_slurm_time_rounds_up_to_minutes() -> None:
    assert slurm_time(90 * 60) == "0-01:30:00"
    assert slurm_time(1) == "0-00:01:00"
    assert slurm_time(2 * 86400 + 61) == "2-00:02:00"


def test_materialize_substitutes_tokens_in_text_files_only(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "tmp" / "job").mkdir(parents=True)
    (bundle / "tmp" / "job" / "run.sh").write_text(
        "host={{host:master}} in={{input:0}} id={{workflow_id}}\n"
    )
    (bundle / "tmp" / "job" / "blob").write_bytes(b"\xff\xfe{{output}}")
    env = {"RESCHED_HOST_MASTER": "node7", "SLURM_JOB_ID": "9"}
    assert materialize(bundle, tmp_path / "task", env) == 2
    assert (
        tmp_path / "task/tmp/job/run.sh"
    ).read_text() == f"host=node7 in={tmp_path}/task/input/0 id=9\n"
    assert (tmp_path / "task/tmp/job/blob").read_bytes() == b"\xff\xfe{{output}}"
    assert substitute_tokens("{{host:nobody}}", env, "/t") == "{{host:nobody}}"


def test_status_reads_the_job_files_without_scontrol(tmp_path: Path) -> None:
    root = tmp_path / "77"
    (root / "allocation-1" / "tasks" / "master").mkdir(parents=True)
    (root / "allocations.log").write_text(
        "0\tnode1\tRESCHEDULE\tmaster\t3\texitActions RESCHEDULE (0+1/3)\n1\tnode2\tCOMPLETE\tmaster\t0\tlead completed\n"
    )
    record = {"decision": "complete", "rule": "complete", "node": "node2", "exit_code": 0}
    (root / "allocation-1" / "tasks" / "master" / "outcome.json").write_text(json.dumps(record))
    status = read_job_status("77", workdir=tmp_path)
    assert [a.result for a in status.allocations] == ["RESCHEDULE", "COMPLETE"]
    assert status.last_outcome == record
    if not status.scheduler:  # a real scontrol may know an unrelated job 77
        assert status.state == "COMPLETED" and status.restarts == 1
    assert any("decision complete" in line for line in status.lines())


def test_cli_dry_run_prints_and_output_writes_the_same_request(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from workflows.cli import main

    template = str(REPO / "templates" / "multi-node-torchrun.yaml")
    args = ["submit", "--backend", "slurm", template, "--set", "upload_location=s3://b/r"]
    args += ["--workdir", "/shared/resched", "--tasks-per-node", "2", "--dry-run"]
    result = CliRunner().invoke(main, [*args, "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    expected = dry_run(
        REPO / "templates" / "multi-node-torchrun.yaml",
        ("upload_location=s3://b/r",),
        workdir="/shared/resched",
        tasks_per_node=2,
    )
    assert expected.materialize() in result.stdout
    script = tmp_path / "out" / expected.jobs[0].script_name
    assert script.read_text() == expected.script
    refused = CliRunner().invoke(main, [*args, "--pool", "a100"])
    assert (
        refused.exit_code == 2 and "--pool is not an option of the slurm backend" in refused.stderr
    )


@pytest.mark.parametrize("ignore", [True, False])
def test_bash_group_rules_are_osmo_runtime_group_reaction(ignore: bool) -> None:
    """The batch script's group rules are generated from osmo_runtime.group_reaction; in
    bash they give the same verdict (Slurm requeues the whole job where OSMO gives one
    task a new pod: docs/osmo-semantics.md)."""
    from workflows import osmo_runtime as rt
    from workflows.backends.slurm.script import group_reaction_function
    from workflows.spec import Group

    group = Group(name="g", ignoreNonleadStatus=ignore,
                  tasks=(Task(name="m", lead=True, command=("x",)), Task(name="w", command=("x",))))
    function = "\n".join(group_reaction_function(group))
    for role in ("lead", "nonlead"):
        for action in rt.ExitAction:
            done = subprocess.run(["bash", "-c", f"{function}\ngroup_reaction {role} {action}"],
                                  capture_output=True, text=True, check=True)
            reaction = rt.group_reaction(is_lead=role == "lead", action=action, ignore_nonlead_status=ignore)
            expected = ("end" if reaction.group_status is not None
                        else "requeue" if reaction.new_pod else "wait")
            assert done.stdout.strip() == expected, (role, action)


def test_a_diamond_waits_for_every_upstream_job(tmp_path: Path) -> None:
    (tmp_path / "wf.yaml").write_text("""\
workflow:
  name: diamond
  tasks:
  - {name: join, command: ["true"], inputs: [{task: left}, {task: Right_Side}]}
  - {name: left, command: ["true"], inputs: [{task: root}]}
  - {name: right-side, command: ["true"], inputs: [{task: root}]}
  - {name: root, command: ["true"]}
""")
    request = dry_run(tmp_path / "wf.yaml", workdir="/w")
    order = [job.group for job in request.jobs]
    assert order[0] == "root-group" and order[-1] == "join-group"
    join = request.jobs[-1]
    argv = join.argv_with({"left-group": "11", "right-side-group": "12", "root-group": "10"})
    assert "--dependency=afterok:11:12" in argv
    assert "--export=ALL,RESCHED_JOB_OF_LEFT_GROUP=11,RESCHED_JOB_OF_RIGHT_SIDE_GROUP=12" in argv
    assert "${RESCHED_JOB_OF_RIGHT_SIDE_GROUP:?set by resched submit}/outputs/right-side" in join.script
