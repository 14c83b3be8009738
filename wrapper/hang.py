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


# A timeout read back from state (the history) beyond this is not one we wrote: a week of
# silence is no hang timeout but hang detection switched off by a damaged file.
MAX_CARRIED_TIMEOUT_S = 7 * 86400.0
MAX_SAFETY_FACTOR = 1000.0  # NVRx uses 5; a factor below 1 would kill healthy steps


def carried_timeout(value: object) -> float | None:
    """A calibrated timeout from state if it is usable (finite, > 0, at most a week), else None.

    NaN, Infinity, 0 or a negative number in a damaged history would otherwise switch
    detection off (NaN and inf never compare greater) or kill a healthy training at once.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_CARRIED_TIMEOUT_S:
        return None
    return seconds


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
        carried = self._carried()
        if carried is not None and self._heartbeat_seen:
            return carried
        return settings.subsequent_timeout_s

    def _carried(self) -> float | None:
        """The earlier attempt's timeout, never below this run's floor (it came from state)."""
        carried = carried_timeout(self.settings.calibrated_s)
        return None if carried is None else max(carried, self.settings.min_calibrated_s)

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
        carried = self._carried()
        if carried is None:
            return proposal
        if proposal is None:
            return carried
        # Never shrink a value an earlier attempt needed: a short attempt may not have
        # reached the slow steps (checkpoint save, evaluation) that an earlier one saw.
        return max(carried, proposal)


def _parse_auto(items: list[str], value: str, where: str) -> HangSettings:
    fields: dict[str, float | int] = {}
    for item in items:
        key, _, raw = item.partition("=")
        field_name = _AUTO_KEYS.get(key.strip())
        if field_name is None or not raw:
            raise HangTimeoutError(
                f"{value!r}: unknown auto setting {item!r}", where=where,
                fix="use auto,initial=DURATION,later=DURATION,factor=N,min=DURATION,warmup=N")
        fields[field_name] = _auto_setting(key.strip(), raw.strip(), item, value, where)
    return HangSettings(auto=True, **fields)  # type: ignore[arg-type]


def _auto_setting(key: str, raw: str, item: str, value: str, where: str) -> float | int:
    """One ``key=value`` of ``auto,...``, in range: a bad one must not kill healthy steps."""
    def bad(why: str, fix: str) -> HangTimeoutError:
        return HangTimeoutError(f"{value!r}: {item!r} {why}", where=where, fix=fix)

    if key == "warmup":
        if not raw.isdigit() or int(raw) > 1_000_000:
            raise bad("is not a number of intervals", "give warmup=N, a whole number from 0 to 1000000")
        return int(raw)
    if key == "factor":
        try:
            factor = float(raw)
        except ValueError:
            factor = math.nan
        if not (1.0 <= factor <= MAX_SAFETY_FACTOR):  # also refuses nan and inf
            raise bad("is not a number from 1 to "
                      f"{MAX_SAFETY_FACTOR:g}", "give factor=F, e.g. factor=5 (NVRx's default)")
        return factor
    try:
        seconds = parse_duration(raw, where=f"{where} {key}")
    except ReschedError:
        seconds = math.nan
    if not (0 < seconds < math.inf):
        raise bad("is not a positive duration", f"give {key}=DURATION, e.g. {key}=5m")
    return seconds
