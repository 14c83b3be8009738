"""Golden renders of the shipped templates, their lint results, and proof that a --set
value cannot change a template's YAML structure.

Regenerate the goldens after a deliberate template change with
``RESCHED_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_templates_golden.py``
and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from workflows.errors import RenderError, SpecError
from workflows.lint import LintOptions, lint_workflow
from workflows.pipeline import parse_rendered
from workflows.render import render_file
from workflows.templates_catalog import list_templates
from workflows.values import ValueOptions

GOLDEN = Path(__file__).parent / "golden" / "templates"
TEMPLATES = {t.name: t.path for t in list_templates()}
SHIPPED = ("single-node-torchrun", "multi-node-torchrun", "multi-node-ft-launcher")
USER_BUCKET = "upload_location=s3://team/run7"
# an image that says it has resched (docker/Dockerfile's tag): the stock NGC default lacks it
USER_IMAGE = "image=registry.example/team/resched-pytorch:25.01-py3"
CASES = {"default": ValueOptions(), "s3-team-run7": ValueOptions(sets=(USER_BUCKET,))}
USER_SETUP = ValueOptions(sets=(USER_BUCKET, USER_IMAGE))


def test_the_three_templates_are_shipped() -> None:
    assert set(SHIPPED) <= set(TEMPLATES)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", SHIPPED)
def test_golden_render(name: str, case: str) -> None:
    text = render_file(TEMPLATES[name], CASES[case]).text
    golden = GOLDEN / f"{name}.{case}.yaml"
    if os.environ.get("RESCHED_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"missing golden {golden}; run with RESCHED_UPDATE_GOLDEN=1"
    assert text == golden.read_text(encoding="utf-8")


def _lint(name: str, options: ValueOptions, **lint: Any) -> list[tuple[str, str, str]]:
    rendered = render_file(TEMPLATES[name], options)
    findings = lint_workflow(rendered, parse_rendered(rendered), LintOptions(**lint))
    return [(f.id, f.severity, f.path) for f in findings]


@pytest.mark.parametrize("name", SHIPPED)
def test_with_a_user_bucket_and_image_only_the_pool_reminder_remains(name: str) -> None:
    assert [f[:2] for f in _lint(name, USER_SETUP)] == [("RS004", "info")]
    assert _lint(name, USER_SETUP, pool_retry_limit=3) == []
    # the stock image of the defaults has no resched: said, for OSMO only (RS019)
    assert {f[:2] for f in _lint(name, CASES["s3-team-run7"], pool_retry_limit=3)} == {
        ("RS019", "warning")}


@pytest.mark.parametrize("name", SHIPPED)
def test_defaults_are_for_the_local_executor(name: str) -> None:
    assert _lint(name, CASES["default"], target="local") == []
    assert {f[0] for f in _lint(name, CASES["default"], target="osmo")} == {"RS002", "RS004", "RS019"}


@pytest.mark.parametrize("name", ["multi-node-torchrun", "multi-node-ft-launcher"])
def test_multi_node_shape(name: str) -> None:
    """Lead master + workers, ignoreNonleadStatus false, checkpoint on the lead, the
    checkpoint url an input of every task, the same RESCHEDULE code everywhere."""
    rendered = render_file(TEMPLATES[name], ValueOptions(sets=(USER_BUCKET, "n_nodes=4")))
    spec = parse_rendered(rendered)
    (group,) = spec.task_groups()
    assert group.ignoreNonleadStatus is False
    assert [t.name for t in group.tasks] == ["master", "worker_1", "worker_2", "worker_3"]
    assert group.lead_task.name == "master"
    assert [bool(t.checkpoint) for t in group.tasks] == [True, False, False, False]
    upload = group.lead_task.checkpoint[0].upload_url
    assert upload == "s3://team/run7/models"
    assert all(upload in [i.url for i in t.inputs] for t in group.tasks)
    assert {t.exitActions.get("RESCHEDULE") for t in group.tasks} == {"3"}


# --set cannot change the structure ---------------------------------------------------

INJECTIONS = (
    "x\nexitActions:\n  COMPLETE: 0-255",
    "x\n      exitActions:\n        COMPLETE: 0-255",
    'x"\n    exitActions: {COMPLETE: 0-255}\n#',
    "x' }}\n{{ 7*7 }}\n  - name: evil\n",
    "x\u2028exitActions: {COMPLETE: 0-255}",
)


def _shape(node: Any, path: str = "") -> set[str]:
    """Every key path and list index of a YAML document (not the scalar values)."""
    if isinstance(node, dict):
        return {p for k, v in node.items() for p in {f"{path}.{k}"} | _shape(v, f"{path}.{k}")}
    if isinstance(node, list):
        return {p for i, v in enumerate(node) for p in {f"{path}[{i}]"} | _shape(v, f"{path}[{i}]")}
    return set()


def _string_defaults(name: str) -> list[str]:
    text = TEMPLATES[name].read_text(encoding="utf-8")
    defaults = yaml.safe_load(text.split("\nworkflow:", 1)[0].split("default-values:", 1)[1])
    return sorted(k for k, v in defaults.items() if isinstance(v, str))


@pytest.mark.parametrize("flag", ["--set", "--set-string"])
@pytest.mark.parametrize("name", SHIPPED)
def test_a_set_value_cannot_change_the_yaml_structure(name: str, flag: str) -> None:
    baseline = render_file(TEMPLATES[name], ValueOptions(sets=(USER_BUCKET,)))
    base_spec = parse_rendered(baseline)
    base_shape = _shape(yaml.safe_load(baseline.text))
    keys = _string_defaults(name)
    assert {"upload_location", "image", "name"} <= set(keys)
    for key in keys:
        used = _uses(name, key)
        for payload in INJECTIONS:
            item = f"{key}={payload}"
            options = (
                ValueOptions(sets=(USER_BUCKET, item))
                if flag == "--set"
                else ValueOptions(sets=(USER_BUCKET,), set_strings=(item,))
            )
            try:
                rendered = render_file(TEMPLATES[name], options)
                spec = parse_rendered(rendered)
            except (SpecError, RenderError):
                # Refused (e.g. a frequency that is not a duration, a name that is not a
                # name): the value never became structure.
                assert key not in {"upload_location", "image", "train_args"}, (key, payload)
                continue
            assert _shape(yaml.safe_load(rendered.text)) == base_shape, (key, payload)
            assert [t.exitActions for t in spec.all_tasks()] == [
                t.exitActions for t in base_spec.all_tasks()
            ], (key, payload)
            if used:  # the whole payload is one string value, verbatim
                assert any(payload in v for v in _values(yaml.safe_load(rendered.text))), key


def _values(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for item in node.values() for v in _values(item)]
    if isinstance(node, list):
        return [v for item in node for v in _values(item)]
    return [str(node)]


def _uses(name: str, key: str) -> bool:
    options = ValueOptions(sets=(USER_BUCKET,), set_strings=(f"{key}=SENTINEL7",))
    try:
        rendered = render_file(TEMPLATES[name], options)
    except RenderError:
        return False
    return any("SENTINEL7" in v for v in _values(yaml.safe_load(rendered.text)))
