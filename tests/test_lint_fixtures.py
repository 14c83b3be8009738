"""Lint the specs in tests/lint_fixtures/ end to end (render -> validate -> lint) and compare
the findings with the reviewed JSON next to each spec.

After a deliberate rule change: ``RESCHED_UPDATE_GOLDEN=1 .venv/bin/python -m pytest
tests/test_lint_fixtures.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from workflows.lint import RULE_IDS, LintOptions
from workflows.pipeline import load_workflow
from workflows.values import ValueOptions

FIXTURES = Path(__file__).parent / "lint_fixtures"
SPECS = sorted(FIXTURES.glob("*.yaml"))


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_fixture_findings(spec: Path) -> None:
    job = load_workflow(spec, ValueOptions(), lint_options=LintOptions(pool_retry_limit=0))
    got = [f.to_json() for f in job.findings]
    for finding in got:
        finding["message"] = finding["message"].replace(str(FIXTURES), "<fixtures>")
        finding["fix"] = finding["fix"].replace(str(FIXTURES), "<fixtures>")
    golden = spec.with_suffix(".findings.json")
    if os.environ.get("RESCHED_UPDATE_GOLDEN") == "1":
        golden.write_text(json.dumps(got, indent=2) + "\n", encoding="utf-8")
    assert got == json.loads(golden.read_text(encoding="utf-8"))


def test_everything_wrong_triggers_nearly_every_rule() -> None:
    job = load_workflow(FIXTURES / "everything-wrong.yaml", ValueOptions(),
                        lint_options=LintOptions(pool_retry_limit=0))
    found = {f.id for f in job.findings}
    # RS011 (more than 20 tasks), RS014 (`{#`, which fails rendering here) and RS016
    # (reschedule without any checkpoint) need specs of their own (test_lint_rules.py);
    # so do RS040 / RS041 (NVRx in-process restart, test_lint_rules_inprocess.py) and
    # RS019 (an image without resched, test_lint_rules_image.py).
    assert set(RULE_IDS) - found == {"RS011", "RS014", "RS016", "RS019", "RS040", "RS041"}
