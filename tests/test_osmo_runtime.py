"""Unit tests of workflows/osmo_runtime.py: OSMO's runtime rules as pure functions."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workflows import osmo_runtime as rt
from workflows.render import TOKEN_RE
from workflows.spec import parse_code_list
from workflows.spec_load import parse_workflow


# -- tokens ---------------------------------------------------------------------------
def test_one_token_definition_is_shared() -> None:
    from workflows.backends.slurm import tokens

    assert TOKEN_RE is rt.TOKEN and tokens.TOKEN is rt.TOKEN


def test_tokens_parse_and_substitute_as_osmo_protects_them() -> None:
    text = "{{input:0}} {{input:prep}} {{host:worker_1}} {{output}} {{ output }} {{uuid}} {{workflow_id}}"
    assert [t.text for t in rt.tokens_in(text)] == [
        "{{input:0}}", "{{input:prep}}", "{{host:worker_1}}", "{{output}}", "{{uuid}}", "{{workflow_id}}"]
    assert rt.substitute(text, lambda t: f"<{t.kind}|{t.argument}>") == (
        "<input|0> <input|prep> <host|worker_1> <output|> {{ output }} <uuid|> <workflow_id|>")
    assert rt.parse_token("input:12").input_index == 12
    assert rt.parse_token("input:prep").input_index is None


def test_input_tokens_name_inputs_by_index_or_task_name() -> None:
    rules = rt.input_rules([SimpleNamespace(task=None, url="s3://b/x", regex=None),
                            SimpleNamespace(task="Pre_Process", url=None, regex="x$")])
    assert rt.input_token_key(rt.parse_token("input:1"), rules) == 1
    assert rt.input_token_key(rt.parse_token("input:pre-process"), rules) == 1  # names compare loosely
    assert rt.input_token_key(rt.parse_token("input:2"), rules) is None
    assert rt.input_token_key(rt.parse_token("input:other"), rules) is None


# -- exitActions ----------------------------------------------------------------------
def test_exit_rules_are_parsed_once_and_match_first() -> None:
    rules = rt.ExitRules.of([("COMPLETE", parse_code_list("0")), ("reschedule", parse_code_list("3,16-17")),
                             ("FAIL", parse_code_list("1-255"))])
    assert all(isinstance(r.ranges[0], rt.CodeRange) for r in rules.rules)
    assert rules.match(16) is rt.ExitAction.RESCHEDULE  # also inside FAIL's 1-255: first wins
    assert rules.match(300) is None
    assert rules.describe() == ("COMPLETE: 0", "RESCHEDULE: 3,16-17", "FAIL: 1-255")


@given(st.lists(st.tuples(st.sampled_from(["COMPLETE", "FAIL", "RESCHEDULE"]),
                          st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10)), min_size=1, max_size=3)),
                max_size=3),
       st.integers(0, 60))
@settings(max_examples=150, deadline=None)
def test_exit_rules_agree_with_a_direct_reading_of_the_code_lists(
    entries: list[tuple[str, list[tuple[int, int]]]], code: int
) -> None:
    texts = [(a, ",".join(f"{lo}-{lo + span}" for lo, span in ranges)) for a, ranges in entries]
    rules = rt.ExitRules.of([(a, parse_code_list(t)) for a, t in texts])
    expected = None
    for action, text in texts:  # the oracle: read the text afresh, first match
        if any(int(p.split("-")[0]) <= code <= int(p.split("-")[1]) for p in text.split(",")):
            expected = action
            break
    assert (rules.match(code) or None) == expected


def test_reschedule_respects_the_retry_limit() -> None:
    rules = rt.ExitRules.of([("RESCHEDULE", parse_code_list("3"))])
    assert rt.exit_decision(rules, 3, retry_id=0, max_retry_per_task=1).action is rt.ExitAction.RESCHEDULE
    spent = rt.exit_decision(rules, 3, retry_id=1, max_retry_per_task=1)
    assert spent.action is rt.ExitAction.FAIL and spent.matched is None and "retry limit 1" in spent.note
    assert rt.exit_decision(rules, 0, retry_id=0, max_retry_per_task=0).action is rt.ExitAction.COMPLETE


# -- checkpoint schedule, files, private paths -----------------------------------------
def test_checkpoint_schedule_counts_from_the_end_of_the_previous_upload() -> None:
    schedule = rt.CheckpointSchedule(60.0)
    assert schedule.first_due(100.0) == 160.0
    assert schedule.next_due(175.5) == 235.5  # the upload ran 160 -> 175.5
    assert schedule.final_upload_after_exit
    assert rt.checkpoint_upload_url("s3://b/run/", "/tmp/models/") == "s3://b/run/models"


def test_file_contents_follow_localpath_base64_and_text() -> None:
    assert rt.file_contents("/tmp/a", contents="x {{output}}", is_base64=False, local_text=None) == \
        rt.FileContents("/tmp/a", b"x {{output}}", substitute_tokens=True)
    raw = rt.file_contents("/tmp/b", contents="e3tvdXRwdXR9fQ==", is_base64=True, local_text=None)
    assert raw.data == b"{{output}}" and not raw.substitute_tokens
    local = rt.file_contents("/tmp/c", contents=None, is_base64=False, local_text=b"from disk")
    assert local.data == b"from disk" and local.substitute_tokens


@pytest.mark.parametrize(("path", "relative"), [
    ("/tmp/job/x.py", "job/x.py"), ("/tmp//a/./b", "a/b"), ("/tmp", ""), ("/tmp/../etc/passwd", None),
    ("/tmpfoo/x", None), ("/workspace/x", None), ("/tmp/a/../../x", None),
])
def test_private_relative_never_escapes_tmp(path: str, relative: str | None) -> None:
    assert rt.private_relative(path) == relative


def test_input_regex_searches_the_relative_path() -> None:
    rule = rt.InputRule(0, rt.InputKind.URL, "s3://x", r"\.txt$")
    assert rule.keeps("a/b.txt") and not rule.keeps("a/b.txt.bak")
    assert rt.InputRule(0, rt.InputKind.URL, "s3://x", None).keeps("anything")


# -- group rules -------------------------------------------------------------------------
def test_group_reaction_accepts_the_action_as_text_or_enum() -> None:
    assert rt.group_reaction(is_lead=True, action="COMPLETE", ignore_nonlead_status=True) == \
        rt.group_reaction(is_lead=True, action=rt.ExitAction.COMPLETE, ignore_nonlead_status=True)
    assert rt.lead_first([SimpleNamespace(name="w", lead=False), SimpleNamespace(name="m", lead=True)])[0].name == "m"


# -- the DAG -----------------------------------------------------------------------------
def _spec(groups: str) -> object:
    return parse_workflow("workflow:\n  name: w\n  groups:\n" + groups)


def _group(name: str, task: str, *inputs: str) -> str:
    ins = "".join(f"\n        - task: {i}" for i in inputs)
    return (f"  - name: {name}\n    tasks:\n    - name: {task}\n      command: [\"true\"]\n"
            + (f"      inputs:{ins}\n" if inputs else ""))


def test_dag_orders_groups_and_reports_what_is_ready() -> None:
    dag = rt.workflow_dag(_spec(_group("c", "tc", "ta", "tb") + _group("a", "ta") + _group("b", "tb", "ta")))
    assert dag.upstream == {"c": ("a", "b"), "a": (), "b": ("a",)}
    assert dag.order() == ("a", "b", "c")
    assert dag.ready(finished=[], started=[]) == ("a",)
    assert dag.ready(finished=["a"], started=["a"]) == ("b",)
    assert dag.downstream_of("a") == ("c", "b")


def test_a_cycle_names_the_groups_and_the_input_that_closes_it() -> None:
    spec = _spec(_group("x", "tx", "tz") + _group("y", "ty", "tx") + _group("z", "tz", "ty"))
    with pytest.raises(rt.DagError, match=r"cycle: group x -> z -> y -> x") as caught:
        rt.workflow_dag(spec)
    assert caught.value.path == "workflow.groups[0].tasks[0].inputs[0]"


def test_inputs_from_the_own_group_or_another_workflow_are_refused() -> None:
    own = parse_workflow("""workflow:
  name: w
  groups:
  - name: g
    tasks:
    - {name: a, lead: true, command: ["true"], inputs: [{task: b}]}
    - {name: b, command: ["true"]}
""")
    with pytest.raises(rt.DagError, match="of its own group g"):
        rt.workflow_dag(own)
    other = parse_workflow('workflow:\n  name: w\n  tasks:\n  - {name: a, command: ["true"], inputs: [{task: "wf-12:b"}]}\n')
    with pytest.raises(rt.DagError, match="of workflow wf-12") as caught:
        rt.workflow_dag(other)
    assert caught.value.path == "workflow.tasks[0].inputs[0]"


def test_the_module_is_pure_and_light() -> None:
    """No pydantic, click or I/O libraries: the Slurm in-job helper imports it at every start."""
    code = ("import sys, workflows.osmo_runtime; "
            "print(sorted(m for m in ('pydantic', 'click', 'yaml', 'fsspec', 'subprocess') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    # ... and the Slurm in-job helper that uses it (with the transfer helpers) stays light too
    code = ("import sys, workflows.backends.slurm.jobside; "
            "print(sorted(m for m in ('pydantic', 'click', 'yaml', 'jinja2', 'fsspec') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# -- the pipeline: a bad DAG or a bad option is one line before anything runs ----------------
CYCLE = """\
workflow:
  name: loop
  groups:
  - name: first
    tasks:
    - name: a
      command: ["true"]
      inputs:
      - task: b
  - name: second
    tasks:
    - name: b
      command: ["true"]
      inputs:
      - task: a
"""


@pytest.mark.parametrize("command", [["run"], ["submit", "--backend", "slurm", "--dry-run"],
                                     ["submit", "--backend", "local"]])
def test_a_cycle_is_one_line_at_file_and_line_and_nothing_runs(tmp_path, command: list[str]) -> None:
    from click.testing import CliRunner

    from workflows.cli import main

    spec = tmp_path / "wf.yaml"
    spec.write_text(CYCLE)
    workdir = tmp_path / "work"
    result = CliRunner().invoke(main, [*command, str(spec), "--workdir", str(workdir)])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if "cycle" in line]
    assert len(lines) == 1 and "Traceback" not in result.output
    assert f"{spec}:9 workflow.groups[0].tasks[0].inputs[0]" in lines[0]
    assert "group first -> second -> first" in lines[0] and "fix:" in lines[0]
    assert not workdir.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--backend", "slurm", "--grace-signal", "HUP"], "--grace-signal 'HUP' is not valid for the slurm backend"),
    (["--backend", "slurm", "--chaos", "kill:a@1s"], "--chaos is not an option of the slurm backend"),
    (["--backend", "local", "--progress", "loud"], "use one of: auto, tty, plain, quiet"),
    (["--backend", "osmo", "--priority", "urgent"], "use one of: HIGH, NORMAL, LOW"),
])
def test_backend_flags_come_from_the_option_tables(tmp_path, args: list[str], message: str) -> None:
    from click.testing import CliRunner

    from workflows.cli import main

    spec = tmp_path / "wf.yaml"
    spec.write_text('workflow:\n  name: w\n  tasks:\n  - {name: a, command: ["true"]}\n')
    result = CliRunner().invoke(main, ["submit", str(spec), "--dry-run", *args])
    assert result.exit_code != 0 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) <= 2  # lint lines aside, one line for the error


def test_another_workflows_task_input_is_osmos_business_not_the_emulators(tmp_path) -> None:
    from click.testing import CliRunner

    from workflows.cli import main

    spec = tmp_path / "wf.yaml"
    spec.write_text('workflow:\n  name: w\n  tasks:\n  - name: a\n    command: ["true"]\n'
                    '    inputs:\n    - task: "wf-12:b"\n')
    sent = CliRunner().invoke(main, ["submit", "--backend", "osmo", "--dry-run", "--show-spec",
                                     str(spec)])
    assert sent.exit_code == 0, sent.output
    assert 'wf-12:b' in sent.output
    for backend in ("local", "slurm"):
        refused = CliRunner().invoke(main, ["submit", "--backend", backend, "--dry-run", str(spec)])
        assert refused.exit_code != 0 and f"{spec}:7 workflow.tasks[0].inputs[0]" in refused.output
        assert "of workflow wf-12" in refused.output


@pytest.mark.parametrize("command", [["run"], ["submit", "--backend", "slurm", "--dry-run"]])
def test_a_regex_that_does_not_compile_is_one_line_before_anything_runs(tmp_path, command: list[str]) -> None:
    from click.testing import CliRunner

    from workflows.cli import main

    spec = tmp_path / "wf.yaml"
    spec.write_text('workflow:\n  name: w\n  tasks:\n  - name: a\n    command: ["true"]\n'
                    '    outputs:\n    - url: file:///nowhere/out\n      regex: "(unclosed"\n')
    result = CliRunner().invoke(main, [*command, str(spec), "--workdir", str(tmp_path / "work")])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"{spec}:8 workflow.tasks[0].outputs[0].regex: regex '(unclosed' does not compile" in result.output
    assert not (tmp_path / "work").exists()
