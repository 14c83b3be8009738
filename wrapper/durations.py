"""OSMO's duration forms, shared by the spec model and the checkpoint syncer.

OSMO accepts a YAML number (seconds), one number with one unit (``Xd``, ``Xh``,
``Xm``, ``Xs``, ``Xms``, ``Xus``) or an ISO-8601 duration (``PT5M``). Compound
forms such as ``1h30m`` are rejected, as OSMO rejects them.
"""

from __future__ import annotations

import math
import re

from wrapper.errors import ReschedError

_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
_SIMPLE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(d|h|m|s|ms|us)\s*$")
_ISO = re.compile(
    r"^P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


class DurationError(ReschedError):
    """A duration that is not in one of OSMO's forms."""


def parse_duration(value: object, *, where: str | None = None) -> float:
    """Return ``value`` in seconds; raise :class:`DurationError` naming the accepted forms."""
    if isinstance(value, bool):
        raise _bad(value, where)
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise _bad(value, where)
        return float(value)
    if not isinstance(value, str):
        raise _bad(value, where)
    text = value.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return _finite(float(text), value, where)
    simple = _SIMPLE.match(text)
    if simple:
        return _finite(float(simple.group(1)) * _UNIT_SECONDS[simple.group(2)], value, where)
    iso = _ISO.match(text.upper())
    if iso and text.upper() not in ("P", "PT") and any(iso.groupdict().values()):
        parts = {k: float(v) for k, v in iso.groupdict().items() if v}
        return _finite(
            parts.get("w", 0.0) * 604800
            + parts.get("d", 0.0) * 86400
            + parts.get("h", 0.0) * 3600
            + parts.get("m", 0.0) * 60
            + parts.get("s", 0.0),
            value, where,
        )
    raise _bad(value, where)


def _finite(seconds: float, value: object, where: str | None) -> float:
    # 400 digits parse to inf: a "duration" that silently means never.
    if not math.isfinite(seconds):
        raise _bad(value, where)
    return seconds


def _bad(value: object, where: str | None) -> DurationError:
    return DurationError(
        f"{value!r} is not a duration",
        where=where,
        fix="write seconds (300), one unit (30s, 5m, 2h, 1d, 500ms) or ISO-8601 (PT5M); "
        "compound forms like 1h30m are not accepted",
    )
