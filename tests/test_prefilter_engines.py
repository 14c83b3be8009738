"""The Hyperscan prefilter changes nothing but speed: for every input, LineScanner finds
the same hits (rule, stream, line number, evidence text, order) with Hyperscan as with
the pure-`re` prefilter, and both agree with a naive line-by-line, rule-by-rule `re`
reference. Inputs: every real log this repository holds (fixtures and the public
corpus), generated lines (non-ASCII, CRLF, ANSI, the control characters Python's \\s
counts as space), and user rules written to trip a block engine ($, \\A, \\Z, case
folding of non-ASCII, VERBOSE, back-references, lookbehind, Python-only syntax)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wrapper.classifier.launcher_logs import strip_ansi
from wrapper.classifier.line_prefix import anchored, message_starts
from wrapper.classifier.prefilter import ENGINE_ENV, HyperscanPrefilter, Prefilter, block_form, make_prefilter
from wrapper.classifier.rules import RuleSet, load_rules
from wrapper.classifier.scanner import KEEP_PER_RULE, LineScanner

pytest.importorskip("hyperscan")

TESTS = Path(__file__).parent
# the logs real runs wrote (real NVRx / launcher runs, the public corpus), each scanned as
# a whole; the rule fixtures tests/fixtures/logs/generate.py writes share most of their
# lines (the noise pool), so their distinct lines are scanned once, together
REAL_LOGS = sorted((TESTS / "fixtures" / "logs" / "real").glob("*.log")) + sorted((TESTS / "fixtures" / "corpus" / "logs").glob("*.log"))
GENERATED_LOGS = sorted((TESTS / "fixtures" / "logs").glob("*.log"))
ALL_LOGS = GENERATED_LOGS + REAL_LOGS
RULES = load_rules()

HOSTILE = load_rules([TESTS / "fixtures" / "rules" / "hostile-engine-rules.yaml"])


def reference_hits(rules: RuleSet, text: str) -> list[tuple[str, int, str]]:
    """Every (rule, line number, line) a naive scan finds; line numbers count "\\n".
    A pattern anchored at ``^`` also matches after the line's launcher / logger prefixes
    (line_prefix.search, the classifier's one definition of a match)."""
    out = []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    # line_prefix.search, unrolled: the prefixes come off each line once, not once per
    # anchored pattern (the same matches; a third of this file's run time)
    table = [(rule.id, [(p, anchored(p)) for p in rule.patterns]) for rule in rules.rules]
    for lineno, line in enumerate(lines, 1):
        line = strip_ansi(line).rstrip("\r")
        rests = [rest for _, rest in message_starts(line)]
        for rule_id, patterns in table:
            if any(p.search(line) or (at_start and any(p.search(rest) for rest in rests))
                   for p, at_start in patterns):
                out.append((rule_id, lineno, line))
    return out


def scan(rules: RuleSet, text: str, engine: str, monkeypatch: pytest.MonkeyPatch, bulk: bool) -> LineScanner:
    monkeypatch.setenv(ENGINE_ENV, engine)
    scanner = LineScanner(rules)
    expected_type = Prefilter if engine == "re" else HyperscanPrefilter
    assert isinstance(scanner._prefilter, expected_type)  # the engine under test is really in use
    if bulk:
        scanner.feed_text(text)
    else:  # feed() takes one line; split the way feed_text counts lines ("\n" only)
        for line in _lines_keep_newline(text):
            scanner.feed(line)
    return scanner


def _lines_keep_newline(text: str) -> list[str]:
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def hit_keys(scanner: LineScanner) -> list[tuple[str, str, int, str]]:
    return [(h.rule_id, h.stream, h.lineno, h.text) for h in scanner.hits]


def kept_by_the_scanner(reference: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """What LineScanner keeps of the reference's hits: each rule's first and last
    KEEP_PER_RULE, in the reference's order."""
    by_rule: dict[str, list[int]] = {}
    for index, (rule_id, _, _) in enumerate(reference):
        by_rule.setdefault(rule_id, []).append(index)
    kept = {i for indexes in by_rule.values()
            for i in indexes[:KEEP_PER_RULE] + indexes[KEEP_PER_RULE:][-KEEP_PER_RULE:]}
    return [hit for i, hit in enumerate(reference) if i in kept]


def assert_same(rules: RuleSet, text: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, str]]:
    """Both engines find the reference's hits, as many of them as the scanner keeps per
    rule; returns the reference's (all of them)."""
    fast = hit_keys(scan(rules, text, "hyperscan", monkeypatch, bulk=True))
    plain = hit_keys(scan(rules, text, "re", monkeypatch, bulk=True))
    assert fast == plain
    reference = reference_hits(rules, text)
    assert [(k[0], k[2]) for k in fast] == [(r[0], r[1]) for r in kept_by_the_scanner(reference)]
    return reference


def distinct_lines(logs: list[Path], cut: int | None = None) -> str:
    """Each distinct line of the logs once (cut to ``cut`` characters), as one text: a
    line's hits are the same wherever it stands."""
    lines = dict.fromkeys(line[:cut] for p in logs
                          for line in p.read_text(encoding="utf-8", errors="replace").split("\n"))
    return "\n".join(lines) + "\n"


# the pure-re prefilter over every catalogue pattern, as tests/test_classify_prefilter.py
# builds it: every line a pattern matches must pass it, and name a candidate
PLAIN_PREFILTER = Prefilter([p for rule in RULES.rules for p in rule.patterns])
PATTERNS_OF = {rule.id: rule.patterns for rule in RULES.rules}


def assert_prefilter_sound(reference: list[tuple[str, int, str]]) -> None:
    """The prefilter's soundness on its own, whatever the scanner does around it (the naive
    reference's lines that a pattern matches as written; those that match only after a
    prefix reach the rules through the scanner's own prefilter, which assert_same checks)."""
    for rule_id, _, line in reference:
        if any(p.search(line) for p in PATTERNS_OF[rule_id]):
            assert PLAIN_PREFILTER.may_match(line), line[:200]
            assert any(True for _ in PLAIN_PREFILTER.candidates(line)), line[:200]


@pytest.mark.parametrize("log", REAL_LOGS, ids=lambda p: p.name)
def test_real_logs_same_hits_with_either_engine(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = log.read_text(encoding="utf-8", errors="replace")
    assert_prefilter_sound(assert_same(RULES, text, monkeypatch))


def test_every_generated_fixture_line_same_hits_with_either_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    # each distinct line of the rule fixtures once (they share the generator's noise pool)
    reference = assert_same(RULES, distinct_lines(GENERATED_LOGS), monkeypatch)
    assert len(reference) > len(GENERATED_LOGS)  # every fixture has lines a rule matches
    assert_prefilter_sound(reference)


def test_every_real_log_line_with_the_hostile_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    # each distinct line once, cut to 2000 characters: the naive reference is slow
    assert_same(HOSTILE, distinct_lines(ALL_LOGS, cut=2000), monkeypatch)


HOSTILE_LINES = [
    "worker exited with code 3\r",  # CRLF: Python strips the \r before `$`
    "FATAL error on node", "FATAL: lost node", "xFATAL lost node",
    "\u212a-fault in bank 2", "k-fault in bank 2", "K-FAULT", "Fehler: Gerät nicht bereit", "Fehler: Gerat nicht bereit",
    "disk quota exceeded", "disk\u00a0quota\u2003exceeded", "disk\x1cquota\x1fexceeded", "disk\x0bquota\x0cexceeded",
    "rank 3 and rank 3 both", "rank 3 and rank 4 both", "no shard corrupt", "the shard corrupt",
    "KernelPanic", "Kern\u00e9lPanic", "slot\x1clost", "slot\u2028lost", "step 7 exploded", "step \u00e9 exploded",
    "cost $12]", "\x1b[31mworker exited with code 9\x1b[0m", "[rank1]: KeyError: 'x'", "ncclRemoteError",
    "Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus", "\u2588\u2588 45% | ncclSystemError", "",
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(HOSTILE_LINES) | st.text(max_size=30), max_size=25),
       st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_generated_blocks_same_hits(lines: list[str], newline: str, final_newline: bool) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        text = newline.join(lines) + (newline if final_newline and lines else "")
        assert_same(HOSTILE, text, monkeypatch)
        assert_same(RULES, text, monkeypatch)


def test_per_line_feed_agrees_with_block_feed(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "\n".join(HOSTILE_LINES * 3) + "\n"
    bulk = hit_keys(scan(HOSTILE, text, "hyperscan", monkeypatch, bulk=True))
    per_line = hit_keys(scan(HOSTILE, text, "hyperscan", monkeypatch, bulk=False))
    assert bulk == per_line and len(bulk) > 10


def test_only_unsafe_patterns_stay_with_re() -> None:
    patterns = [p for rule in HOSTILE.rules for p in rule.patterns]
    prefilter = make_prefilter(patterns)
    assert isinstance(prefilter, HyperscanPrefilter)
    slow = {p.pattern for p in prefilter.re_patterns}
    # non-ASCII (written or escaped) and Python-only syntax; $, \A, \Z are rewritten instead
    # (the catalogue's own: messages in a translated locale's script)
    catalogue = {p.pattern for rule in RULES.rules for p in rule.patterns if not p.pattern.isascii()}
    assert slow == {"(?i:\\u212a-fault)", "(?i:\u212a-sign)", "Fehler: Gerät nicht bereit", "(?a:\\w+Panic)",
                    "(?i:straße voll|SIGSEGV in (?i:worker))"} | catalogue, slow


def test_block_form_rewrites_anchors_outside_classes_only() -> None:
    assert block_form(r"code \d+$") == r"code \d+(?:\r*$)"
    assert block_form(r"\AFATAL\Z") == r"^FATAL(?:\r*$)"
    assert block_form(r"[$]x[]$]\$") == r"[$]x[]$]\$"
    assert block_form(r"[^]$]$") == r"[^]$](?:\r*$)"
    assert re.compile(block_form(r"a|b$"), re.M).search("xb\r\n")


def test_engine_can_be_forced_to_re(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINE_ENV, "re")
    assert isinstance(make_prefilter([re.compile("x+y")]), Prefilter)
    monkeypatch.delenv(ENGINE_ENV)
    assert isinstance(make_prefilter([re.compile("x+y")]), HyperscanPrefilter)

