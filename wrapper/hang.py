"""Hang detection: a task is hung when it shows no progress for the hang timeout.

Progress is a heartbeat (the mtime of the file ``wrapper.heartbeat()`` touches) or,
for code that cannot be changed, a new output line. Once a heartbeat has been seen in
an attempt only heartbeats count: a training loop that stopped stepping but whose
background threads keep logging (NCCL watchdogs, data loaders) is still hung.

``--hang-timeout auto`` calibrates like NVRx's calculated timeouts: before calibration
a generous timeout applies (``initial_timeout_s`` until the first progress, which covers
start-up, ``import torch`` and checkpoint load; ``subsequent_timeout_s`` after it). The
detector records the heartbeat intervals of the whole attempt (checkpoint saves and
evaluations included) and, after a warm-up, proposes ``safety_factor x`` the longest
one. That value is persisted through the history and used by the NEXT attempt for the
intervals after the first progress; it never tightens the attempt that measured it,
because that attempt may not yet have seen its slowest step. Output lines never
calibrate (their spacing says nothing about step time), so without heartbeats ``auto``
keeps the generous timeouts.

Both modes have two phases. Until the attempt's first progress (start-up: launcher,
``import torch``, rendezvous, checkpoint load) the start-up allowance applies; after it,
the steady-state timeout. A fixed ``--hang-timeout 90`` is the steady-state timeout; its
start-up allowance is ``startup=`` (default: auto's initial timeout, never below the
fixed value): a quiet start-up longer than a tight step timeout is not a hang. Every
attempt, in-place retries included, starts in the start-up phase.

All time comes from the caller (``now`` arguments), so tests drive it without waiting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from wrapper.durations import parse_duration
from wrapper.errors import ReschedError


class HangTimeoutError(ReschedError):
    """A --hang-timeout value that is neither a duration nor ``auto``."""


@dataclass(frozen=True)
class HangSettings:
    """How the hang timeout is chosen. ``fixed_s`` None and ``auto`` False: detection off."""

    fixed_s: float | None = None
    auto: bool = False
    initial_timeout_s: float = 1800.0
    subsequent_timeout_s: float = 300.0
    safety_factor: float = 5.0
    warmup_intervals: int = 3
    min_calibrated_s: float = 30.0
    calibrated_s: float | None = None  # carried from the history (an earlier attempt)
    startup_s: float | None = None  # fixed mode: allowance before the first progress

    def startup_allowance_s(self) -> float:
        """How long an attempt may stay silent before its first progress."""
        if self.fixed_s is not None:
            allowance = self.startup_s if self.startup_s is not None else self.initial_timeout_s
            return max(self.fixed_s, allowance)
        return self.initial_timeout_s

    @property
    def enabled(self) -> bool:
        return self.auto or self.fixed_s is not None


_AUTO_KEYS = {
    "initial": "initial_timeout_s", "later": "subsequent_timeout_s",
    "factor": "safety_factor", "min": "min_calibrated_s", "warmup": "warmup_intervals",
}


def parse_hang_timeout(value: str | None, *, where: str = "--hang-timeout") -> HangSettings:
    """``None``/``""``/``off``/``0`` -> off, a duration -> fixed, ``auto`` -> calibrated.

    ``auto`` takes optional settings: ``auto,initial=20m,later=5m,factor=5,min=30s,warmup=3``;
    a fixed timeout takes a start-up allowance: ``90,startup=10m``.
    """
    if value is None:
        return HangSettings()
    text = value.strip().lower()
    if text in ("", "off", "none", "0"):
        return HangSettings()
    if text == "auto" or text.startswith("auto,"):
        return _parse_auto(text.split(",")[1:], value, where)
    head, *items = [part.strip() for part in text.split(",")]
    seconds = _fixed_duration(head, value, where)
    startup: float | None = None
    for item in items:
        key, _, raw = item.partition("=")
        if key != "startup" or not raw:
            raise HangTimeoutError(f"{value!r}: unknown setting {item!r}", where=where,
                                   fix="a fixed timeout takes only startup=DURATION, e.g. 90,startup=10m")
        startup = _fixed_duration(raw, value, where)
    return HangSettings(fixed_s=seconds, startup_s=startup)


def _fixed_duration(raw: str, value: str, where: str) -> float:
    try:
        seconds = parse_duration(raw, where=where)
    except ReschedError as error:
        raise HangTimeoutError(
            f"{value!r} is not a hang timeout",
            where=where,
            fix="give seconds (600), a duration (10m), 'auto', or add ,startup=DURATION",
        ) from error
    if not math.isfinite(seconds) or seconds <= 0:
        raise HangTimeoutError(f"{value!r} is not a hang timeout", where=where,
                               fix="give a positive duration, e.g. 90 or 10m (off: 'off')")
    return seconds


class HangDetector:
    """Tracks progress of one attempt and says when it has been silent too long."""

    def __init__(self, settings: HangSettings, *, started_at: float) -> None:
        self.settings = settings
        self._last_progress = started_at
        self._progress_seen = False
        self._heartbeat_seen = False
        self._last_heartbeat: float | None = None
        self._intervals: list[float] = []

    @property
    def heartbeat_seen(self) -> bool:
        return self._heartbeat_seen

    def observe_heartbeat(self, now: float) -> None:
        if self._last_heartbeat is not None:
            self._intervals.append(now - self._last_heartbeat)
        self._last_heartbeat = now
        self._heartbeat_seen = True
        self._progress(now)

    def observe_output(self, now: float) -> None:
        if not self._heartbeat_seen:
            self._progress(now)

    def _progress(self, now: float) -> None:
        self._last_progress = now
        self._progress_seen = True

    def timeout_s(self) -> float | None:
        """The timeout in force now, or None when detection is off."""
        settings = self.settings
        if not settings.enabled:
            return None
        if not self._progress_seen:
            return settings.startup_allowance_s()
        if settings.fixed_s is not None:
            return settings.fixed_s
        if settings.calibrated_s is not None and self._heartbeat_seen:
            return settings.calibrated_s
        return settings.subsequent_timeout_s

    def silent_for(self, now: float) -> float:
        return now - self._last_progress

    def expired(self, now: float) -> bool:
        timeout = self.timeout_s()
        return timeout is not None and self.silent_for(now) > timeout

    def calibrated_timeout_s(self) -> float | None:
        """The timeout to carry to the next attempt (auto only), or None if not enough data."""
        settings = self.settings
        if not settings.auto:
            return None
        measured = self._intervals[settings.warmup_intervals:]
        proposal: float | None = None
        if measured:
            longest = max(measured)
            proposal = max(settings.min_calibrated_s, settings.safety_factor * longest)
            proposal = math.ceil(proposal * 1000) / 1000
        if settings.calibrated_s is None:
            return proposal
        if proposal is None:
            return settings.calibrated_s
        # Never shrink a value an earlier attempt needed: a short attempt may not have
        # reached the slow steps (checkpoint save, evaluation) that an earlier one saw.
        return max(settings.calibrated_s, proposal)


def _parse_auto(items: list[str], value: str, where: str) -> HangSettings:
    fields: dict[str, float | int] = {}
    for item in items:
        key, _, raw = item.partition("=")
        field_name = _AUTO_KEYS.get(key.strip())
        if field_name is None or not raw:
            raise HangTimeoutError(
                f"{value!r}: unknown auto setting {item!r}", where=where,
                fix="use auto,initial=DURATION,later=DURATION,factor=N,min=DURATION,warmup=N")
        try:
            if key.strip() == "warmup":
                fields[field_name] = int(raw)
            elif key.strip() == "factor":
                fields[field_name] = float(raw)
            else:
                fields[field_name] = parse_duration(raw.strip(), where=f"{where} {key}")
        except ValueError as error:
            raise HangTimeoutError(f"{value!r}: {item!r} is not a number", where=where,
                                   fix="give warmup a whole number and factor a number") from error
    return HangSettings(auto=True, **fields)  # type: ignore[arg-type]
