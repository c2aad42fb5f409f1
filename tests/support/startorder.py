"""The order the suite's tests start in under pytest-xdist's worksteal (tests/conftest.py
applies it on every worker, each of which collects the whole suite)."""

from __future__ import annotations


def long_first(items: list, shares: int) -> list:
    """`items` rearranged so that each of the `shares` contiguous shares pytest-xdist's
    worksteal hands its workers (the first len // shares items to one, half of the rest to
    the next, ...: xdist/scheduler/worksteal.py) starts with its part of the long tests,
    dealt round in order; every other test keeps its order. Idle workers steal from the
    end of a share, never its long tests; in collection order a long test near the end of
    a share started minutes into the run and ran alone at its end (test_train's, 25 s)."""
    long = [it for it in items if it.get_closest_marker("long")]
    rest = [it for it in items if not it.get_closest_marker("long")]
    out: list = []
    for i in range(shares):
        size = (len(items) - len(out)) // (shares - i)
        mine = long[i::shares]
        take = max(0, size - len(mine))
        out += mine + rest[:take]
        rest = rest[take:]
    return out + rest
