"""How long an in-place retry waits before relaunching the training.

The first in-place retry starts at once: a crashed or killed rank's peers are already
torn down by the time the wrapper decides, and every second of waiting is a second of
an allocation doing nothing (a bare relaunch loop does not wait either). Later retries
of the same allocation back off exponentially, so a failure that repeats quickly (a
flapping link, a port still held) is not hammered, with jitter so that the tasks of one
job, which all fail together, do not relaunch in lock step against a shared service
(rendezvous store, file system).

The jitter is a pure function of the allocation and the retry number, not of a random
generator's state: the same history gives the same decision (tests, ``resched classify
--history``, the simulator), while different allocations still spread out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wrapper.durations import parse_duration
from wrapper.errors import ReschedError


class BackoffError(ReschedError):
    """A --backoff value that cannot be used."""


_SYNTAX = "give BASE[,max=DURATION][,jitter=FRACTION], e.g. 1s,max=60s,jitter=0.5, or 0"


@dataclass(frozen=True)
class Backoff:
    """Retry n (0-based) waits 0 for n = 0, else min(max, base * 2**(n-1)) +- jitter."""

    base_s: float = 1.0
    max_s: float = 60.0
    jitter: float = 0.5  # fraction of the wait, drawn in [-jitter, +jitter]

    def delay_s(self, retry_index: int, key: str = "") -> float:
        if retry_index <= 0 or self.base_s <= 0 or self.max_s <= 0:
            return 0.0
        wait = min(self.max_s, self.base_s * 2.0 ** min(retry_index - 1, 60))
        if self.jitter > 0:
            wait *= 1.0 + self.jitter * _unit(f"{key}/{retry_index}")
        return round(min(self.max_s, max(0.0, wait)), 3)


def _unit(text: str) -> float:
    """A stable number in [-1, 1) from ``text``."""
    import hashlib  # here, not at the top: loading OpenSSL costs every CLI start ~10-25 ms

    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**63 - 1.0


def parse_backoff(value: str | None, *, where: str = "--backoff") -> Backoff:
    """``None`` -> the default; ``0``/``off`` -> never wait; ``1s,max=60s,jitter=0.5``."""
    if value is None:
        return Backoff()
    text = value.strip().lower()
    if text in ("0", "off", "none"):
        return Backoff(base_s=0.0)
    head, *items = [part.strip() for part in text.split(",")]
    fields: dict[str, float] = {"base_s": _duration(head, value, where)}
    for item in items:
        key, _, raw = item.partition("=")
        if key == "max" and raw:
            fields["max_s"] = _duration(raw, value, where)
        elif key == "jitter" and raw:
            fields["jitter"] = _fraction(raw, value, where)
        else:
            raise BackoffError(f"{value!r}: unknown setting {item!r}", where=where, fix=_SYNTAX)
    backoff = Backoff(**fields)
    if backoff.max_s < backoff.base_s:
        raise BackoffError(f"{value!r}: max is below the base wait", where=where, fix=_SYNTAX)
    return backoff


def _duration(raw: str, value: str, where: str) -> float:
    try:
        seconds = parse_duration(raw, where=where)
    except ReschedError as error:
        raise BackoffError(f"{value!r}: {raw!r} is not a duration", where=where, fix=_SYNTAX) from error
    if not math.isfinite(seconds) or seconds < 0:
        raise BackoffError(f"{value!r}: {raw!r} is not a duration", where=where, fix=_SYNTAX)
    return seconds


def _fraction(raw: str, value: str, where: str) -> float:
    try:
        fraction = float(raw)
    except ValueError:
        fraction = math.nan
    if not (0.0 <= fraction <= 1.0):
        raise BackoffError(f"{value!r}: jitter {raw!r} is not a fraction between 0 and 1",
                           where=where, fix=_SYNTAX)
    return fraction
