"""Random YAML text and random (near-)workflows never crash the validator with anything
but a one-line SpecError, and lint never crashes on a spec that validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lint_fixtures import rendered_from

from workflows.errors import SpecError
from workflows.lint import LintOptions, lint_workflow
from workflows.spec_load import parse_workflow

KEYS = [
    "name", "image", "command", "args", "environment", "files", "inputs", "outputs", "lead",
    "exitActions", "checkpoint", "resource", "groups", "tasks", "ignoreNonleadStatus", "barrier",
    "path", "url", "frequency", "contents", "localpath", "task", "regex", "RESCHEDULE", "FAIL",
    "COMPLETE", "timeout", "exec_timeout", "resources", "labels", "dataset", "base64",
]
NAMES = st.sampled_from(["a", "b", "master", "worker_1", "A", "osmo-ctrl", "1x", "g"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=True),
    st.text(max_size=12), NAMES,
    st.sampled_from(["3", "0,1-10", "5m", "PT5M", "1h30m", "s3://b/r", "file:///x", "/tmp/m",
                     "http://x", "{{input:0}}", "resched wrap --reschedule-code 4 -- x"]),
)
TREES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=6)), children, max_size=5),
    ),
    max_leaves=40,
)


def _task() -> st.SearchStrategy[dict[str, Any]]:
    checkpoint = st.fixed_dictionaries(
        {"path": st.sampled_from(["/tmp/models", "/m/", "rel"]),
         "url": st.sampled_from(["s3://b/r", "file:///tmp/c", "/tmp/c", "gs://x/"]),
         "frequency": st.one_of(st.integers(-1, 600), st.sampled_from(["5m", "10s", "PT1M"]))}
    )
    return st.fixed_dictionaries(
        {"name": NAMES, "command": st.sampled_from([["x"], ["bash", "-c", "resched wrap -- t"]])},
        optional={
            "lead": st.booleans(),
            "exitActions": st.dictionaries(
                st.sampled_from(["RESCHEDULE", "FAIL", "COMPLETE", "reschedule"]),
                st.one_of(st.integers(0, 4000), st.sampled_from(["0,3", "1-200", "137", "3-5,300"])),
                max_size=3,
            ),
            "checkpoint": st.lists(checkpoint, max_size=2),
            "inputs": st.lists(st.fixed_dictionaries({"url": st.sampled_from(["s3://b/r/models", "s3://b/r"])}), max_size=2),
            "files": st.lists(
                st.fixed_dictionaries({"path": st.sampled_from(["/a", "/b", "rel"])},
                                      optional={"contents": st.text(max_size=20), "localpath": st.sampled_from(["x.py", "/nope"])}),
                max_size=2,
            ),
            "environment": st.dictionaries(st.sampled_from(["RESCHED_RESCHEDULE_CODE", "RESCHED_ABORT_CODE", "X"]),
                                           st.one_of(st.integers(0, 300), st.text(max_size=4)), max_size=2),
        },
    )


WORKFLOWS = st.one_of(
    st.fixed_dictionaries({"name": NAMES, "tasks": st.lists(_task(), min_size=1, max_size=3)}),
    st.fixed_dictionaries(
        {"name": NAMES,
         "groups": st.lists(
             st.fixed_dictionaries({"name": NAMES, "tasks": st.lists(_task(), min_size=1, max_size=3)},
                                   optional={"ignoreNonleadStatus": st.booleans()}),
             min_size=1, max_size=2)}
    ),
)


def _check(text: str, tmp_path: Path | None = None) -> None:
    try:
        spec = parse_workflow(text, source="fuzz.yaml")
    except SpecError as error:
        assert "\n" not in str(error)
        return
    if tmp_path is not None and text.startswith("workflow:"):
        source = tmp_path / "fuzz.yaml"
        rendered = rendered_from(text, source)
        for target in ("osmo", "local"):
            for finding in lint_workflow(rendered, spec, LintOptions(target=target, pool_retry_limit=0)):
                assert finding.id.startswith("RS") and finding.message and finding.fix


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_random_text_never_crashes(text: str) -> None:
    _check(text)
    _check("workflow:\n" + text)


@settings(max_examples=200, deadline=None)
@given(TREES)
def test_random_trees_never_crash(tree: Any) -> None:
    _check(yaml.safe_dump({"workflow": tree}))
    _check(yaml.safe_dump(tree))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(workflow=WORKFLOWS)
def test_near_valid_workflows_validate_or_fail_cleanly_and_lint_never_crashes(
    workflow: dict[str, Any], tmp_path: Path
) -> None:
    _check(yaml.safe_dump({"workflow": workflow}, sort_keys=False), tmp_path)
