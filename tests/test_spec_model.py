"""The spec model (workflows/spec.py + spec_load.py): OSMO's rules, coercions, and errors
that name the YAML path and line."""

from __future__ import annotations

import textwrap

import pytest

from workflows.errors import SpecError
from workflows.spec import Checkpoint, CodeRange, Workflow, parse_code_list
from workflows.spec_load import parse_workflow


def parse(body: str) -> Workflow:
    return parse_workflow(textwrap.dedent(body), source="train.yaml")


def error_of(body: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse(body)
    assert "\n" not in str(info.value)
    return info.value


def one_task(extra: str = "", name: str = "a") -> str:
    """A flat one-task workflow; ``extra`` lines go under the task (4-space indent)."""
    lines = "".join(f"    {line}\n" for line in textwrap.dedent(extra).splitlines() if line)
    return f"workflow:\n  name: w\n  tasks:\n  - name: {name}\n    command: [x]\n{lines}"


# names -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "train", "a-b_c9", "Worker_1", "x" * 60])
def test_valid_task_names(name: str) -> None:
    assert parse(one_task(name=name)).tasks[0].name == name


@pytest.mark.parametrize("name", ["1a", "a-", "a_", "-a", "a b", "a.b", "ä"])
def test_invalid_task_names_name_the_path_and_line(name: str) -> None:
    error = error_of(one_task(name=f"'{name}'"))
    assert error.where == "train.yaml:4 workflow.tasks[0].name"
    assert "is not valid" in error.message


@pytest.mark.parametrize(("first", "second"), [("a", "A"), ("a-b", "a_b"), ("Train_X", "train-x")])
def test_task_names_collide_case_insensitively_with_dash_and_underscore(first: str, second: str) -> None:
    body = one_task(name=first) + f"  - name: {second}\n    command: [y]\n"
    error = error_of(body)
    assert f"task names '{first}' and '{second}' collide" in error.message
    assert error.where.startswith("train.yaml:1 workflow")


def test_group_names_collide_too() -> None:
    body = """\
    workflow:
      name: w
      groups:
      - name: Train
        tasks: [{name: a, command: [x]}]
      - name: train
        tasks: [{name: b, command: [x]}]
    """
    assert "group names 'Train' and 'train' collide" in error_of(body).message


@pytest.mark.parametrize("name", ["osmo-ctrl", "OSMO_ctrl", "Osmo-Ctrl"])
def test_osmo_ctrl_is_reserved(name: str) -> None:
    error = error_of(one_task(name=name))
    assert "reserved by OSMO" in error.message
    assert error.where == "train.yaml:4 workflow.tasks[0].name"


# leads and groups ------------------------------------------------------------------

_GROUP = """\
workflow:
  name: w
  groups:
  - name: g
    tasks:
    - name: a
      command: [x]{lead_a}
    - name: b
      command: [x]{lead_b}
"""


@pytest.mark.parametrize(
    ("lead_a", "lead_b", "found"),
    [("", "", "none"), ("\n      lead: true", "\n      lead: true", "2 (a, b)")],
)
def test_exactly_one_lead_per_group(lead_a: str, lead_b: str, found: str) -> None:
    error = error_of(_GROUP.format(lead_a=lead_a, lead_b=lead_b))
    assert f"must have exactly one task with lead: true, found {found}" in error.message
    assert error.where == "train.yaml:4 workflow.groups[0]"


def test_one_lead_is_accepted_and_found() -> None:
    spec = parse(_GROUP.format(lead_a="", lead_b="\n      lead: true"))
    assert spec.groups is not None
    assert spec.groups[0].lead_task.name == "b"
    assert spec.groups[0].ignoreNonleadStatus is True  # OSMO's default
    assert spec.groups[0].barrier is True


def test_a_one_task_group_gets_the_lead_automatically() -> None:
    spec = parse("workflow:\n  name: w\n  groups:\n  - name: g\n    tasks: [{name: a, command: [x]}]\n")
    assert spec.task_groups()[0].lead_task.name == "a"


def test_flat_tasks_become_one_group_each_named_after_the_task() -> None:
    spec = parse(one_task(name="train") + "  - name: eval\n    command: [y]\n")
    groups = spec.task_groups()
    assert [g.name for g in groups] == ["train-group", "eval-group"]
    assert [g.lead_task.name for g in groups] == ["train", "eval"]
    assert spec.group_of("EVAL").name == "eval-group"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("workflow:\n  name: w\n", "exactly one of groups or tasks"),
        ("workflow:\n  name: w\n  tasks: []\n", "tasks is empty"),
        ("workflow:\n  name: w\n  groups: []\n", "groups is empty"),
        ("workflow:\n  name: w\n  tasks: [{name: a, command: [x]}]\n  groups: []\n", "exactly one of"),
    ],
)
def test_workflow_needs_exactly_one_of_groups_or_tasks(body: str, needle: str) -> None:
    assert needle in error_of(body).message


# exitActions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ranges"),
    [
        ("3", [(3, 3)]),
        ("0,1-10,16", [(0, 0), (1, 10), (16, 16)]),
        ("3006", [(3006, 3006)]),
        ("5-5", [(5, 5)]),
    ],
)
def test_code_list_syntax(text: str, ranges: list[tuple[int, int]]) -> None:
    assert parse_code_list(text) == tuple(CodeRange(low=a, high=b) for a, b in ranges)


@pytest.mark.parametrize(
    "codes", ["'1, 2'", "'1-'", "'-1'", "abc", "'1--2'", "'1-2-3'", "''", "'3,'", "3.5", "true", "'10-1'"]
)
def test_bad_code_lists_are_rejected_at_their_line(codes: str) -> None:
    error = error_of(one_task(f"exitActions: {{RESCHEDULE: {codes}}}"))
    assert error.where == "train.yaml:6 workflow.tasks[0].exitActions"
    assert "exit code" in error.message


def test_yaml_int_codes_and_lowercase_actions_are_coerced() -> None:
    task = parse(one_task("exitActions: {reschedule: 3, Fail: 1-2}")).all_tasks()[0]
    assert task.exitActions == {"RESCHEDULE": "3", "FAIL": "1-2"}
    assert task.exit_action(3) == "RESCHEDULE"
    assert task.exit_action(2) == "FAIL"
    assert task.exit_action(0) is None


def test_first_matching_action_wins() -> None:
    task = parse(one_task("exitActions: {FAIL: 1-10, RESCHEDULE: 3}")).all_tasks()[0]
    assert task.exit_action(3) == "FAIL"


def test_restart_is_rejected_with_a_hint() -> None:
    error = error_of(one_task("exitActions: {RESTART: 3}"))
    assert "RESTART but its server rejects it" in error.message


def test_an_action_given_twice_is_rejected() -> None:
    assert "given twice" in error_of(one_task("exitActions: {RESCHEDULE: 3, reschedule: 4}")).message


# checkpoint frequency and durations ------------------------------------------------


@pytest.mark.parametrize(
    ("frequency", "seconds"),
    [(300, 300.0), (2.5, 2.5), ("'300'", 300.0), ("30s", 30.0), ("5m", 300.0), ("2h", 7200.0),
     ("1d", 86400.0), ("500ms", 0.5), ("PT5M", 300.0), ("PT1H30M", 5400.0), ("P1D", 86400.0)],
)
def test_frequency_forms(frequency: object, seconds: float) -> None:
    body = one_task(f"checkpoint: [{{path: /tmp/m, url: 's3://b/r', frequency: {frequency}}}]")
    assert parse(body).all_tasks()[0].checkpoint[0].frequency_s == seconds


@pytest.mark.parametrize("frequency", ["1h30m", "5 minutes", "true", "-5", ".nan", "m", "PT", "[1]"])
def test_bad_frequencies_are_rejected(frequency: str) -> None:
    body = one_task(f"checkpoint: [{{path: /tmp/m, url: 's3://b/r', frequency: {frequency}}}]")
    error = error_of(body)
    assert error.where == "train.yaml:6 workflow.tasks[0].checkpoint[0].frequency"


def test_compound_timeout_is_rejected_too() -> None:
    body = "workflow:\n  name: w\n  timeout: {exec_timeout: 1h30m}\n  tasks: [{name: a, command: [x]}]\n"
    error = error_of(body)
    assert error.where == "train.yaml:3 workflow.timeout.exec_timeout"
    assert "compound forms like 1h30m are not accepted" in str(error)


def test_checkpoint_upload_url_is_url_slash_basename() -> None:
    checkpoint = Checkpoint(path="/tmp/models/", url="s3://b/run/", frequency="5m")
    assert checkpoint.upload_url == "s3://b/run/models"


# urls ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["s3://b/x", "gs://b/x", "swift://b/x", "tos://b/x", "azure://b/x", "S3://B/x", "file:///tmp/x",
     "/tmp/x", "relative/x"],
)
def test_accepted_url_schemes(url: str) -> None:
    body = one_task(f"inputs: [{{url: '{url}'}}]\noutputs: [{{url: '{url}'}}]")
    assert parse(body).all_tasks()[0].inputs[0].url == url


@pytest.mark.parametrize("url", ["http://x/y", "https://x/y", "hdfs://x/y", "ftp://x"])
def test_other_url_schemes_are_rejected(url: str) -> None:
    error = error_of(one_task(f"outputs: [{{url: '{url}'}}]"))
    assert error.where == "train.yaml:6 workflow.tasks[0].outputs[0].url"
    assert "is not supported" in error.message


def test_dataset_inputs_were_removed() -> None:
    error = error_of(one_task("inputs: [{dataset: {name: imagenet}}]"))
    assert "dataset inputs were removed from OSMO in 2026" in error.message
    assert error.where == "train.yaml:6 workflow.tasks[0].inputs[0]"


def test_an_input_needs_exactly_one_of_task_or_url() -> None:
    assert "exactly one of task or url" in error_of(one_task("inputs: [{regex: x}]")).message


def test_input_from_an_unknown_task() -> None:
    assert "unknown task 'nope'" in error_of(one_task("inputs: [{task: nope}]")).message


# coercion, unknown keys, files -----------------------------------------------------


def test_scalars_are_coerced_to_strings() -> None:
    body = one_task("args: [1, 2.5, true]\nenvironment: {N: 8, FLAG: false}\nvolumeMounts: [1]")
    task = parse(body).all_tasks()[0]
    assert task.args == ("1", "2.5", "True")
    assert task.environment == {"N": "8", "FLAG": "False"}
    assert task.volumeMounts == ("1",)


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [("exitActons", "exitActions"), ("comand", "command"), ("chekpoint", "checkpoint"),
     ("Inputs", "inputs")],
)
def test_unknown_task_keys_get_did_you_mean(key: str, suggestion: str) -> None:
    error = error_of(one_task(f"{key}: []"))
    assert error.message == f"unknown key {key!r}"
    assert error.fix == f"did you mean {suggestion!r}?"
    assert error.where == f"train.yaml:6 workflow.tasks[0].{key}"


def test_unknown_group_key_gets_did_you_mean() -> None:
    body = "workflow:\n  name: w\n  groups:\n  - name: g\n    ignoreNonLeadStatus: false\n    tasks: [{name: a, command: [x]}]\n"
    error = error_of(body)
    assert error.fix == "did you mean 'ignoreNonleadStatus'?"
    assert error.where == "train.yaml:5 workflow.groups[0].ignoreNonLeadStatus"


def test_unknown_key_without_a_close_match_lists_allowed_keys() -> None:
    error = error_of(one_task("zzz: 1"))
    assert error.fix is not None and "allowed keys:" in error.fix and "exitActions" in error.fix


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        ("[{path: rel, contents: x}]", "must be absolute"),
        ("[{path: /osmo/x, contents: x}]", "under /osmo"),
        ("[{path: /a}]", "exactly one of contents or localpath"),
        ("[{path: /a, contents: x, localpath: y}]", "exactly one of contents or localpath"),
        ("[{path: /a, contents: x}, {path: /a, contents: y}]", "appears twice"),
    ],
)
def test_file_rules(files: str, needle: str) -> None:
    assert needle in error_of(one_task(f"files: {files}")).message


def test_a_required_key_missing() -> None:
    error = error_of("workflow:\n  name: w\n  tasks:\n  - name: a\n    image: x\n")
    assert error.message == "required key 'command' is missing"
    assert error.where == "train.yaml:4 workflow.tasks[0].command"


def test_resource_must_exist_when_resources_are_declared() -> None:
    body = "workflow:\n  name: w\n  resources: {default: {gpu: 8}}\n  tasks: [{name: a, command: [x], resource: big}]\n"
    assert "uses resource 'big'" in error_of(body).message


def test_more_than_16_labels() -> None:
    labels = ", ".join(f"l{i}: v" for i in range(17))
    body = f"workflow:\n  name: w\n  labels: {{{labels}}}\n  tasks: [{{name: a, command: [x]}}]\n"
    assert error_of(body).where == "train.yaml:3 workflow.labels"


# errors name file:line and map through first_line -----------------------------------


def test_lines_are_mapped_into_the_source_file() -> None:
    with pytest.raises(SpecError) as info:
        parse_workflow(one_task("exitActons: {}"), source="t.yaml", first_line=20)
    assert info.value.where == "t.yaml:25 workflow.tasks[0].exitActons"


def test_several_problems_are_counted_in_one_line() -> None:
    error = error_of(one_task("comand: [x]\nexitActons: {}"))
    assert "(1 more problem after this one)" in error.message


def test_yaml_syntax_errors_name_the_line() -> None:
    error = error_of("workflow:\n  name: w\n  tasks:\n  - name: a\n   command: [x\n")
    assert error.where is not None and error.where.startswith("train.yaml:")
    assert "not valid YAML" in error.message


@pytest.mark.parametrize("body", ["", "- a\n", "workflow: [1]\n", "other: 1\n"])
def test_no_workflow_mapping(body: str) -> None:
    error = error_of(body)
    assert error.where is not None and error.where.startswith("train.yaml")


def test_a_recursive_alias_is_a_spec_error_not_a_crash() -> None:
    error = error_of("workflow: &w\n  name: w\n  tasks: [*w]\n")
    assert "recursive YAML alias" in error.message
