"""The plain progress lines of `resched run` say in words how an in-place failure ended
(they printed a Python dict: "FAILED   in place {'exit_code': None, 'signal': 15}")."""

from __future__ import annotations

import io

import pytest

from workflows.backends.local.progress import Progress
from workflows.backends.local.timeline import Event


@pytest.mark.parametrize(("fields", "said"), [
    ({"exit_code": None, "signal": 15, "hung": False}, "master  FAILED   in place: signal 15"),
    ({"exit_code": 3, "signal": None, "hung": False}, "master  FAILED   in place: exit 3"),
    ({"exit_code": None, "signal": 9, "hung": True}, "master  FAILED   in place: hung, signal 9"),
])
def test_in_place_failure_line(fields: dict, said: str) -> None:
    out = io.StringIO()
    Progress("plain", out).on_event(Event(0.0, "wrapper_failure_detected", "master", fields))
    assert said in out.getvalue()
    assert "{" not in out.getvalue()
