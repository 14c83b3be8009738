"""The in-place retry backoff: immediate first retry, doubling, capped, stable jitter."""

from __future__ import annotations

import pytest

from wrapper.backoff import Backoff, BackoffError, parse_backoff


def test_first_retry_is_immediate_then_doubles_up_to_the_cap() -> None:
    plain = Backoff(base_s=1.0, max_s=5.0, jitter=0.0)
    assert [plain.delay_s(n) for n in range(6)] == [0.0, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert plain.delay_s(10_000) == 5.0  # no overflow on absurd retry counts


def test_jitter_stays_in_its_band_is_stable_and_spreads_allocations() -> None:
    jittered = Backoff(base_s=4.0, max_s=100.0, jitter=0.5)
    assert jittered.delay_s(0, "a") == 0.0  # the first retry never waits, jitter or not
    waits = {jittered.delay_s(1, f"alloc-{i}") for i in range(50)}
    assert all(2.0 <= w <= 6.0 for w in waits)
    assert len(waits) > 10  # tasks failing together do not relaunch in lock step
    assert jittered.delay_s(3, "x") == jittered.delay_s(3, "x")  # same history, same decision
    assert Backoff(base_s=4.0, max_s=5.0, jitter=0.5).delay_s(5, "x") <= 5.0


def test_parse_forms() -> None:
    assert parse_backoff(None) == Backoff()
    assert parse_backoff("0").delay_s(3) == 0.0 and parse_backoff("off").delay_s(1) == 0.0
    assert parse_backoff("2s,max=1m,jitter=0") == Backoff(base_s=2.0, max_s=60.0, jitter=0.0)
    assert parse_backoff("500ms").base_s == 0.5


@pytest.mark.parametrize("bad", ["soon", "-1", "1s,max=", "1s,jitter=2", "1s,jitter=nan",
                                 "1s,speed=3", "10s,max=1s", "1s,,max=2s"])
def test_bad_values_are_one_clear_error(bad: str) -> None:
    with pytest.raises(BackoffError) as info:
        parse_backoff(bad)
    assert "--backoff" in str(info.value) and "\n" not in str(info.value)
