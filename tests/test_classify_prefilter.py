"""The scanner's prefilter is sound: it never rejects a line that some rule matches."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from wrapper.classifier.prefilter import Prefilter, anchor, required_literals, trie_regex
from wrapper.classifier.rules import load_rules

RULES = load_rules()
PATTERNS = [p for rule in RULES.rules for p in rule.patterns]
PREFILTER = Prefilter(PATTERNS)


def test_required_literals() -> None:
    assert required_literals(re.compile(r"Timed out after \d+ seconds waiting")) == (("Timed out after ", False),)
    assert set(required_literals(re.compile(r"nccl(?:Remote|System)Error"))) == {("Remote", False), ("System", False)}
    assert required_literals(re.compile(r"(?i:shard corrupt)")) == (("shard corrupt", True),)
    assert required_literals(re.compile(r"\d+ ?x")) is None  # nothing literal long enough
    assert anchor("remote process exited") is None and anchor("an illegal Memory") == "Memory"


def test_trie_regex_matches_exactly_its_words() -> None:
    words = ["Error", "ErrorX", "Exit", "Xid", "X"]
    regex = re.compile(f"^(?:{trie_regex(words)})$")
    assert all(regex.match(w) for w in words)
    assert not any(regex.match(w) for w in ["Err", "Exi", "Xi", "ErrorXY", ""])


# Soundness on every real log line (a line some pattern matches passes the prefilter and
# names a candidate) is checked in tests/test_prefilter_engines.py, on the lines its naive
# reference scan finds: one scan of the fixtures, not two.


_PIECES = st.sampled_from(
    ["ncclRemoteError", "Xid (PCI:0000:3b:00): 79", "KeyError: 'x'", "[rank1]: ", "oom-kill", " ", "Error",
     "fallen off the bus", "CUDA out of memory. Tried to allocate", "waiting for clients. 1/2 clients joined",
     "Timed out after 30 seconds", "0/3 restart attempts left. Exiting", "DistBackendError", "Watchdog caught",
     "abc", "\t", "ValueError", ":", "Section 'step' has been open for 3.1 seconds"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=8))
def test_prefilter_is_sound_on_random_lines(pieces: list[str]) -> None:
    line = "".join(pieces)
    if any(p.search(line) for p in PATTERNS):
        assert PREFILTER.may_match(line)
