"""The suite's ordering hook (tests/conftest.py) only reorders: every test runs once."""

from __future__ import annotations

from conftest import LONG_TESTS, balanced_order


def test_order_is_a_permutation_with_the_long_tests_at_the_front_of_each_slice() -> None:
    long = list(LONG_TESTS)[:6]
    nodeids = [f"tests/test_a.py::test_{i}" for i in range(30)] + long + [f"tests/test_z.py::test_{i}" for i in range(30)]
    order = balanced_order(nodeids, 3)
    assert sorted(order) == list(range(len(nodeids)))
    ran = [nodeids[i] for i in order]
    # worksteal's first split of 66 tests over 3 workers: 22 each; each slice starts with its long tests
    slices = [ran[0:22], ran[22:44], ran[44:66]]
    firsts = [s[0] for s in slices]
    assert all(f in long for f in firsts)
    assert sum(1 for s in slices for n in s if n in long) == 6
    # the other tests keep their order
    others = [n for n in ran if n not in long]
    assert others == [n for n in nodeids if n not in long]


def test_no_workers_or_no_long_tests_keeps_the_order() -> None:
    nodeids = [f"tests/test_a.py::test_{i}" for i in range(5)]
    assert balanced_order(nodeids, 3) == list(range(5))
    assert balanced_order(nodeids + list(LONG_TESTS)[:1], 1) == list(range(6))
