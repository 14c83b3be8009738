"""Golden files: rendered workflow text, byte for byte (whitespace and final newline pinned).

Each golden holds ``Rendered.text`` exactly, i.e. the server's reply; the CLI adds one
newline (tested in test_render_cli.py). To regenerate after an intended change:
``RESCHED_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_render_golden.py`` and
review the diff. Every golden is also checked against an independent transcription of
OSMO's server code (tests/test_render_oracle.py) so a golden cannot silently pin a bug.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from workflows.render import render_file
from workflows.values import ValueOptions

FIXTURES = Path(__file__).parent / "render_fixtures"


@dataclass(frozen=True)
class Case:
    source: str
    golden: str
    sets: tuple[str, ...] = ()
    set_strings: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    def options(self) -> ValueOptions:
        return ValueOptions(files=tuple(FIXTURES / f for f in self.files), sets=self.sets,
                            set_strings=self.set_strings)


CASES = (
    Case("tutorial.yaml", "tutorial.golden"),
    Case("tutorial.yaml", "tutorial_3nodes.golden", sets=("n_nodes=3", "workflow_name=big"),
         set_strings=("reschedule_code=7",)),
    Case("whitespace.yaml", "whitespace.golden"),
    Case("crlf.yaml", "crlf.golden", sets=("x=2",)),
    Case("plain.yaml", "plain.golden"),
    Case("set_values.yaml", "set_values.golden",
         sets=("name=x", "count=08", "ratio=1e3", "big=1_000", "hexa=0x10", "exp=-3",
               "notanumber=nan", "eq=a=b=c", "spaced= 5 ", "leading=inf", "a.b=7")),
    Case("nested.yaml", "nested_files.golden", files=("values_a.yaml", "values_b.yaml"),
         sets=("count=2",)),
)


def render_case(case: Case) -> str:
    return render_file(FIXTURES / case.source, case.options()).text


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.golden)
def test_golden(case: Case) -> None:
    text = render_case(case)
    golden = FIXTURES / case.golden
    if os.environ.get("RESCHED_UPDATE_GOLDEN"):
        golden.write_bytes(text.encode("utf-8"))
    assert text == golden.read_bytes().decode("utf-8")


@pytest.mark.parametrize("case", [c for c in CASES if not c.files and "a.b=7" not in c.sets],
                         ids=lambda case: case.golden)
def test_golden_matches_osmo_transcription(case: Case) -> None:
    from test_render_oracle import osmo_server_render

    source = (FIXTURES / case.source).read_text(encoding="utf-8")
    expected = osmo_server_render(source, list(case.sets), list(case.set_strings))
    assert (FIXTURES / case.golden).read_bytes().decode("utf-8") == expected


def test_tutorial_golden_keeps_every_runtime_token() -> None:
    text = (FIXTURES / "tutorial.golden").read_text(encoding="utf-8")
    for token in ("{{input:0}}", "{{host:master}}", "{{workflow_id}}", "{{output}}",
                  "{{uuid}}", "{{input:master}}"):
        assert text.count(token) == 2, token  # two tasks
    assert "${#nodes[@]}" in text  # came out of the raw block
    assert "default-values" not in text and "version" not in text
