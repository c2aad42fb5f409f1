"""fan_out's lanes (burnin/transports/fanout.py): daemon threads, so that Python keeps no
shutdown lock per thread to scan at each start (a group of 10,000 members, a thread
each); a group within the bound runs every item at once; a bug raised in fn stops new
items, cancels the run and is raised, the first in item order."""

from __future__ import annotations

import threading

import pytest

from burnin.transports.fanout import Cancel, fan_out


def test_a_group_within_the_bound_runs_all_at_once_on_daemon_threads():
    n = 40
    met = threading.Barrier(n, timeout=10)  # broken unless all n run together
    locks_before = len(threading._shutdown_locks)  # type: ignore[attr-defined]
    seen: list[tuple[bool, int]] = []

    def one(i: int) -> int:
        seen.append((threading.current_thread().daemon,
                     len(threading._shutdown_locks)))  # type: ignore[attr-defined]
        met.wait()
        return i * i
    assert fan_out(range(n), one, n) == [i * i for i in range(n)]
    assert all(daemon for daemon, _ in seen)
    assert max(locks for _, locks in seen) == locks_before


def test_past_the_bound_at_most_limit_run_at_once():
    running, most, lock = [0], [0], threading.Lock()

    def one(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threading.Event().wait(0.002)
        with lock:
            running[0] -= 1
        return i
    assert fan_out(range(60), one, 4) == list(range(60))
    assert most[0] <= 4


def test_a_bug_in_fn_cancels_the_run_starts_nothing_more_and_is_raised_first_in_order():
    cancel = Cancel()
    started: list[int] = []

    def one(i: int) -> int:
        started.append(i)
        if i in (3, 5):
            raise ValueError(f"bug {i}")
        return i
    with pytest.raises(ValueError, match="bug 3"):
        fan_out(range(200), one, 1, cancel)
    assert cancel.is_set()
    assert started == [0, 1, 2, 3], "one lane: nothing after the bug starts"


def test_items_that_end_at_once_are_run_by_few_lanes():
    threads: set[int] = set()

    def one(i: int) -> int:
        threads.add(threading.get_ident())
        return i
    assert fan_out(range(2000), one, 2000) == list(range(2000))
    assert len(threads) < 2000, "a lane that is idle takes the next item: no new thread"
