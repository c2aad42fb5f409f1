"""The watch that bounds paramiko's unbounded SSH waits (burnin/transports/sshbounds.py):
past its bound a wait's connection is hung up, once; a wait that ends in time is left
alone; a hang-up that itself blocks holds no other bound."""

from __future__ import annotations

import threading
import time

from burnin.transports.sshbounds import Bound, Watch, bounded

HANG_S = 30  # for a hang only


def watch_passed(seconds: float) -> None:
    """Return once the watch has handled every deadline up to `seconds` from now and every
    hang-up it started has ended. The sign is a later bound's own hang-up: the watch takes
    deadlines in order, and starts each hang-up's thread before it looks at the next."""
    passed = threading.Event()
    with bounded(seconds, passed.set):
        assert passed.wait(HANG_S), "the watch never came to a later bound"
    for t in threading.enumerate():
        if t.name == "burnin-ssh-hang-up":
            t.join(HANG_S)


def test_a_wait_past_its_bound_is_hung_up_once_and_marked():
    calls = []
    hung = threading.Event()

    def hang_up():
        calls.append(time.monotonic())
        hung.set()
    t0 = time.monotonic()
    with bounded(0.2, hang_up) as bound:
        assert hung.wait(HANG_S), "never hung up"
    watch_passed(0.1)  # a second hang-up of the same wait would have come by then
    assert bound.expired and len(calls) == 1
    assert calls[0] - t0 >= 0.2


def test_a_wait_that_ends_in_time_is_left_alone():
    calls = []
    with bounded(0.3, lambda: calls.append(1)) as bound:
        pass
    watch_passed(0.6)  # past its deadline: had it been hung up, it would be by now
    assert calls == [] and not bound.expired


def test_the_earliest_bound_fires_first_whatever_the_order_they_came_in():
    order, early = [], threading.Event()

    def hang_up(name):
        order.append(name)
        early.set()
    with bounded(60, lambda: hang_up("late")), bounded(0.2, lambda: hang_up("early")):
        # "late" came first and was the heap's top when "early" arrived: the watch must
        # wake for the new, earlier deadline rather than sleep until the first one.
        assert early.wait(HANG_S), "the earlier bound waited for the later one"
    assert order == ["early"]


def test_a_hang_up_that_blocks_holds_no_other_bound():
    watch = Watch()
    release, second = threading.Event(), threading.Event()
    first = Bound(0.1, release.wait)  # a close that waits (a proxied node's)
    other = Bound(0.3, second.set)
    watch.start(first)
    watch.start(other)
    try:
        assert second.wait(HANG_S), "the blocked hang-up held the watch"
        assert first.expired and other.expired
    finally:
        release.set()
