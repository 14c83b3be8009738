"""docs/osmo-semantics.md is the ONE table of OSMO behaviour -> resched behaviour that the
local executor's and the Slurm backend's docs share: both link it, neither keeps a second
copy of its rows, and every row marked **differs** is explained under its own name."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
TABLE = DOCS / "osmo-semantics.md"


def _rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def test_the_table_has_three_filled_columns() -> None:
    header, *rows = _rows(TABLE.read_text())
    assert header[0] == "OSMO behaviour" and "local" in header[1] and "slurm" in header[2]
    assert len(rows) >= 15
    for row in rows:
        assert len(row) == 3 and all(row), row


def test_every_difference_is_explained_under_its_row_name() -> None:
    text = TABLE.read_text()
    _, *rows = _rows(text)
    differences = text.split("## Differences, and why", 1)[1]
    explained = set(re.findall(r"\*\*(.+?)\*\*", differences))
    for name, local, slurm in rows:
        if "**differs**" in local or "**differs**" in slurm:
            assert name.split(" (")[0] in explained, f"row {name!r} differs but is not explained"


def test_both_backend_docs_link_the_one_table_and_do_not_copy_it() -> None:
    _, *rows = _rows(TABLE.read_text())
    for doc in ("local-executor.md", "slurm.md"):
        text = (DOCS / doc).read_text()
        assert "(osmo-semantics.md)" in text, doc
        copied = [r[0] for r in rows if f"| {r[0]} |" in text]
        assert not copied, f"{doc} repeats rows of the shared table: {copied}"


def test_no_doc_still_says_task_inputs_are_refused_on_slurm() -> None:
    text = (DOCS / "slurm.md").read_text()
    assert "`task:` inputs (another\ntask's outputs) and input `regex:` are refused" not in text
    assert "--dependency=afterok" in text
