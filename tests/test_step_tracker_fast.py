"""StepTracker's fast search finds exactly what its two regexes find (it runs on every
block of output the wrapper scans, so it must not cost ~0.2 s per MiB as they did)."""

from __future__ import annotations

import random

from wrapper.stop_outcome import _STEP_PATTERNS, StepTracker

# Pieces that probe the word boundaries, the case rules (re.IGNORECASE also takes the
# long s for "s"; "İ" lowers to two characters) and non-ASCII digits.
_PIECES = ("step", "STEP", "Step", "global_step", "GLOBAL_STEP", "xglobal_step", "_step",
           "astep", " ", "=", ":", "iteration", "xiteration", "/", "12", "7", "\n", "a", "_",
           "é", "İ", "ſtep", "K", "3x", " 5 ", "\t", "٣", "ß", "ǅ")


def _reference(text: str) -> int | None:
    steps = [int(m.group(1)) for pattern in _STEP_PATTERNS for m in pattern.finditer(text)]
    return max(steps, default=None)


def test_fast_step_search_matches_the_reference_regexes() -> None:
    rng = random.Random(14)
    for _ in range(20000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 12)))
        tracker = StepTracker()
        tracker.feed(text)
        assert tracker.last_step == _reference(text), repr(text)


def test_real_log_lines_and_a_flood_without_steps() -> None:
    tracker = StepTracker()
    tracker.feed(" iteration      120/    1000 | consumed samples: 3840 | lm loss: 7.1\n")
    tracker.feed("Epoch 0: 40%|████| step=130, loss=2.1\n" + "y\n" * 100000)
    tracker.feed("global_step 125 (an older one)\n")
    assert tracker.last_step == 130
