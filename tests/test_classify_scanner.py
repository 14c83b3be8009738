"""LineScanner: ANSI stripping, line numbers per stream, bounded hits, bulk == per-line."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from wrapper.classifier.rules import load_rules
from wrapper.classifier.scanner import LineScanner

RULES = load_rules()
FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def test_ansi_codes_are_stripped_before_matching() -> None:
    scanner = LineScanner(RULES)
    hit = scanner.feed("\x1b[1;31m[rank3]: ncclRemote\x1b[0mError: remote process exited\n")
    assert hit is not None and hit.rule_id == "nccl-error"  # colour codes inside the token are removed
    assert hit.text == "[rank3]: ncclRemoteError: remote process exited"
    hit = scanner.feed("\x1b[1;31m[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\x1b[0m\n")
    assert hit is not None and hit.rule_id == "cuda-oom" and "\x1b" not in hit.text


def test_line_numbers_are_counted_per_stream() -> None:
    scanner = LineScanner(RULES)
    for _ in range(3):
        scanner.feed("noise\n", stream="stdout")
    scanner.feed("noise\n", stream="stderr")
    hit = scanner.feed("[rank1]: KeyError: 'x'\n", stream="stderr")
    assert (hit.stream, hit.lineno) == ("stderr", 2)
    assert scanner.lines_seen("stdout") == 3


def test_a_line_matching_several_rules_records_each() -> None:
    scanner = LineScanner(RULES)
    line = ("[rank2]: RuntimeError: NCCL communicator was aborted on rank 2. Original reason for failure was: "
            "NCCL error: remote process exited or there was a network error\n")
    first = scanner.feed(line)
    assert first.rule_id == "nccl-error"  # the higher-precedence rule
    # (and the mark of a generic exception class closing a traceback: evidence, no cause)
    assert {h.rule_id for h in scanner.hits} == {"nccl-error", "nccl-communicator-aborted",
                                                 "generic-exception-raised"}


def test_cascade_flood_never_pushes_out_the_root_cause() -> None:
    scanner = LineScanner(RULES)
    scanner.feed("[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n")
    for rank in range(5000):
        scanner.feed(f"[rank{rank}]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1) ran for 600023 milliseconds before timing out.\n")
    kept = scanner.hits
    assert kept[0].rule_id == "gpu-hardware-fault"
    watchdog = [h for h in kept if h.rule_id == "nccl-watchdog-timeout"]
    assert len(watchdog) == 16 and watchdog[-1].lineno == 5001  # first 8 + last 8


def test_very_long_line_keeps_a_window_around_the_match() -> None:
    scanner = LineScanner(RULES)
    hit = scanner.feed("x" * 100_000 + " torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB " + "y" * 50_000)
    assert hit.rule_id == "cuda-oom"
    assert "CUDA out of memory" in hit.text and len(hit.text) <= 1010


def test_feed_text_equals_feeding_every_line() -> None:
    text = (FIXTURES / "nccl-remote-error.log").read_text() + (FIXTURES / "gpu-ecc.log").read_text()
    one, bulk = LineScanner(RULES), LineScanner(RULES)
    for line in text.splitlines(keepends=True):
        one.feed(line, stream="log")
    assert bulk.feed_text(text, stream="log") == len(text.splitlines())
    assert [(h.rule_id, h.lineno, h.text) for h in one.hits] == [(h.rule_id, h.lineno, h.text) for h in bulk.hits]


_LINES = st.sampled_from([
    "noise line\n", "[rank1]: KeyError: 'a'\n", "ncclSystemError here\n", "\x1b[31mWatchdog caught collective operation timeout\x1b[0m\n",
    "GPU has fallen off the bus\n", "\n", "Timed out after 30 seconds waiting for clients. 1/2 clients joined.\n",
])


@settings(max_examples=60, deadline=None)
@given(st.lists(_LINES, max_size=40), st.integers(min_value=0, max_value=40))
def test_feed_text_in_chunks_equals_per_line(lines: list[str], split: int) -> None:
    text = "".join(lines)
    cut = sum(len(line) for line in lines[:split])
    one, bulk = LineScanner(RULES), LineScanner(RULES)
    for line in lines:
        one.feed(line)
    for part in (text[:cut], text[cut:]):
        if part:  # "" would be one empty line
            bulk.feed_text(part)
    assert [(h.rule_id, h.lineno) for h in one.hits] == [(h.rule_id, h.lineno) for h in bulk.hits]


def test_saved_log_line_numbers_count_newlines_only(tmp_path: Path) -> None:
    from wrapper.classifier import classify_artifacts

    log = tmp_path / "odd.log"
    body = "a\r\nb\x0cc\x1cd\u2028e\n" * 3000 + "[rank2]: KeyError: 'x'\r\n" + "tail\n" * 10
    log.write_bytes(body.encode())
    diagnosis = classify_artifacts(logs=[log], error_files=[], exit_code=1, signal=None, rules=RULES)
    hit = next(e for e in diagnosis.evidence if "KeyError" in e.text)
    assert hit.lineno == 6001  # two "\n" per repetition; \r, \x0c, \x1c, \u2028 do not count
    assert log.read_bytes().split(b"\n")[hit.lineno - 1].startswith(b"[rank2]: KeyError")


def test_feed_text_blocks_without_trailing_newline_and_empty_lines() -> None:
    one, bulk = LineScanner(RULES), LineScanner(RULES)
    lines = ["noise", "", "", "[rank1]: KeyError: 'x'", "", "ncclSystemError"]
    for line in lines:
        one.feed(line + "\n")
    for block in ("noise", "", "\n[rank1]: KeyError: 'x'", "", "ncclSystemError"):
        bulk.feed_text(block)  # whole lines joined by "\n", no trailing newline
    assert bulk.lines_seen() == one.lines_seen() == 6
    assert [(h.rule_id, h.lineno) for h in bulk.hits] == [(h.rule_id, h.lineno) for h in one.hits] == [
        ("python-user-error", 4), ("nccl-error", 6)]
