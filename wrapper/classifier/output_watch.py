"""What a training's output tells the judge, read block by block.

One reader for both paths to a decision: ``resched wrap`` feeds it the blocks it
forwards while the training runs, ``resched classify`` feeds it a saved log in blocks.
It holds the rule scanner's hits, what NVRx reported (in-process restarts, straggler
reports, the launcher's own result), how far the training got (progress lines) and the
launcher's in-job restarts; :func:`wrapper.classifier.verdict.judge` decides on it.
"""

from __future__ import annotations

from typing import Any

from wrapper.classifier.nvrx_watch import NvrxWatch
from wrapper.launchers import IN_JOB_RESTART
from wrapper.stop_outcome import StepTracker


class OutputWatch:
    """Fed every block of output (whole lines); remembers what the judge needs."""

    def __init__(self, scanner: Any) -> None:
        self.scanner = scanner
        self.nvrx = NvrxWatch()  # in-process restarts, straggler reports
        self.steps = StepTracker()  # how far the training got
        self.in_job_restarts = 0  # the launcher's restarts: part of this attempt
        self._feed_text = getattr(scanner, "feed_text", None)  # same result, prefilter in C

    def feed_text(self, text: str, stream: str) -> bool:
        """Read a block of whole lines; True when it shows an in-process restart under way."""
        if self._feed_text is not None:
            self._feed_text(text, stream)
        else:
            for line in text.split("\n")[:-1]:  # every line ends with a newline
                self.scanner.feed(line, stream)
        self.steps.feed(text)
        restarting = self.nvrx.feed(text)
        if "attempts left" in text:
            self.in_job_restarts += len(IN_JOB_RESTART.findall(text))
        return restarting

    def mark_gap(self, resume_at: int, stream: str) -> None:
        """Output went by unseen: the scanner numbers lines from byte ``resume_at`` on."""
        mark = getattr(self.scanner, "mark_gap", None)
        if mark is not None:
            mark(resume_at, stream)

    def skip_lines(self, count: int, stream: str) -> None:
        """Lines forwarded unscanned (an output burst): only the line count moves."""
        skip = getattr(self.scanner, "skip_lines", None)
        if skip is not None:
            skip(count, stream)
        else:
            for _ in range(count):
                self.scanner.feed("", stream)
