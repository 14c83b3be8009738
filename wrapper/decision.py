"""The four things resched can decide about an attempt, as one type.

A ``StrEnum`` so that the value written to JSON (outcome records, history, ``resched
classify --format json``) is the plain word, and a record read back from JSON converts
with ``Decision(text)`` at that boundary.
"""

from __future__ import annotations

from enum import StrEnum


class Decision(StrEnum):
    COMPLETE = "complete"
    RETRY = "retry"
    RESCHEDULE = "reschedule"
    ABORT = "abort"

    @classmethod
    def parse(cls, value: object) -> Decision:
        """``Decision`` from a member or its word; ValueError names the allowed words."""
        if isinstance(value, Decision):
            return value
        try:
            return cls(str(value))
        except ValueError:
            allowed = ", ".join(d.value for d in cls)
            raise ValueError(f"{value!r} is not a decision ({allowed})") from None


DECISIONS: tuple[str, ...] = tuple(d.value for d in Decision)
