"""The recovery-math formulas against hand computations and published examples."""

from __future__ import annotations

import math

import pytest

from workflows import recovery_math as rm


def test_young_interval_and_waste_match_the_llama3_example() -> None:
    # recovery-math.md: M = 2.78 h, delta = 5 s -> tau* ~ 5.3 min, checkpoint waste 3.2 %,
    # 10 min of detection + restart adds 6 %: ETTR ~ 90.8 %.
    m = 2.78 * 3600
    tau = rm.young_interval(5.0, m)
    assert tau / 60 == pytest.approx(5.3, abs=0.05)
    best = rm.optimal_waste(5.0, m)
    assert best.checkpoint + best.lost_work == pytest.approx(0.032, abs=0.001)
    # at tau*, checkpoint overhead equals expected lost work (the optimum's signature)
    assert best.checkpoint == pytest.approx(best.lost_work)
    slow = rm.optimal_waste(5.0, m, detection_s=300.0, restart_s=300.0)
    assert slow.recovery == pytest.approx(600 / m)
    assert slow.ettr == pytest.approx(0.908, abs=0.002)


def test_waste_parts_by_hand() -> None:
    w = rm.waste(interval_s=20.0, checkpoint_s=1.0, mtbf_s=100.0, detection_s=2.0, restart_s=8.0)
    assert (w.checkpoint, w.lost_work, w.recovery) == (0.05, 0.1, 0.1)
    assert w.total == pytest.approx(0.25) and w.ettr == pytest.approx(0.75)


def test_young_interval_minimises_the_model() -> None:
    tau = rm.young_interval(2.0, 400.0)
    best = rm.waste(tau, 2.0, 400.0).total
    for other in (tau * 0.5, tau * 0.9, tau * 1.1, tau * 2):
        assert rm.waste(other, 2.0, 400.0).total > best


def test_daly_interval_is_close_to_young_when_delta_is_small_and_capped_at_m() -> None:
    assert rm.daly_interval(1.0, 1e6) == pytest.approx(rm.young_interval(1.0, 1e6), rel=1e-3)
    # by hand: sqrt(2*10*100) = 44.72; ratio 0.05 -> 44.72 * (1 + 0.07454 + 0.00556) - 10
    assert rm.daly_interval(10.0, 100.0) == pytest.approx(
        math.sqrt(2000) * (1 + math.sqrt(0.05) / 3 + 0.05 / 9) - 10, rel=1e-9)
    assert rm.daly_interval(300.0, 100.0) == 100.0


def test_model_floors_at_zero_when_failures_outpace_recovery() -> None:
    assert rm.waste(10.0, 5.0, 10.0, detection_s=5.0, restart_s=10.0).ettr == 0.0


def test_ettr_and_mtbf() -> None:
    assert rm.ettr(45.0, 60.0) == 0.75
    assert rm.mtbf(60.0, 3) == 20.0
    assert rm.mtbf(60.0, 0) is None


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_bad_numbers_are_refused_with_the_parameter_name(bad: float) -> None:
    with pytest.raises(ValueError, match="mtbf_s"):
        rm.young_interval(1.0, bad)
    with pytest.raises(ValueError, match="interval_s"):
        rm.waste(bad, 1.0, 10.0)
