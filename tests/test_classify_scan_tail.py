"""`resched classify` keeps the last lines of a saved log (where a launcher's failure
summary is) while scanning it in blocks: the tail and its line numbers must be exactly
those of the file, whatever the block size and line endings."""

from __future__ import annotations

from pathlib import Path

import pytest

from wrapper.classifier import classify
from wrapper.classifier.rules import load_rules
from wrapper.classifier.scanner import LineScanner


@pytest.mark.parametrize("read_chars", [64, 1000, 4096, 1 << 22])
@pytest.mark.parametrize("ending", ["", "\n", "\n\n"])
def test_tail_is_the_files_last_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_chars: int, ending: str) -> None:
    monkeypatch.setattr(classify, "_READ_CHARS", read_chars)
    lines = [f"line {i} " + "x" * (i % 37) for i in range(2500)]
    log = tmp_path / "run.log"
    log.write_text("\n".join(lines) + ending, encoding="utf-8")
    expected = log.read_text(encoding="utf-8").split("\n")
    if expected[-1] == "":
        expected.pop()
    block = classify._scan_log(log, LineScanner(load_rules()))
    assert list(block.lines) == expected[-classify._SUMMARY_TAIL_LINES:]
    assert block.first_lineno == len(expected) - len(block.lines) + 1
