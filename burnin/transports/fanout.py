"""Fan-out with cancel: the one way burnin runs work on many nodes at once.

Like Fabric's GroupResult, every item's result comes back, failures beside successes:
`fn` must not raise, since one node's failure belongs in its own result, never in
another's. Interrupted (Ctrl-C, or SIGTERM turned into one) while it waits, it sets the
run's `cancel`, which every transport and launcher honours by killing its command,
starts nothing new, waits a bounded time for the running ones to end, and re-raises:
the run stops within seconds.

Probes that must run together (a burn, the all-reduce) start together: when the whole
fan-out fits its bound, its items share a StartGate. A transport whose command waits
for its first input before it measures anything (ssh: the probe's settings) starts the
command, then hands the gate that input (`arrive`); once every item has arrived or left
(an item leaves when it returns, or stands aside: its command starts some other way),
one thread writes every input in one loop, a few tens of microseconds per node, rather
than each node's start (a session opened, a command run: two round trips and a core's
worth of Python each) apart (benchmarks/ssh_start_skew.py). The gate is the item's, found
by the thread that runs it (start_gate), so that nothing between the fan-out and the
transport has to carry it.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterable

CANCEL_WAIT_S = 20.0  # an interrupted run waits this long for its commands to be killed
GATE_POLL_S = 1.0  # how often a command waiting at the gate looks at the run's cancel


class Cancel(threading.Event):
    """A run's cancel: an Event that select() can also wait on (fileno: readable once it is
    set), so that a command's read loop sleeps until output, its deadline or the cancel,
    rather than waking every second to look (at 10,000 running probes, 10,000 wake-ups a
    second: benchmarks/ssh_start_skew.py, the CPU per running probe)."""

    def __init__(self):
        super().__init__()
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        weakref.finalize(self, _close, self._r, self._w)

    def set(self) -> None:
        super().set()
        try:
            os.write(self._w, b"!")
        except OSError:
            pass  # already written: it stays readable

    def fileno(self) -> int:
        return self._r


def _close(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


class StartGate:
    """Where the started commands of one fan-out wait for each other (see above)."""

    def __init__(self, items: int, cancel: threading.Event | None = None):
        self._cv = threading.Condition()
        self._waiting = items  # items yet to arrive or leave
        self._sends: list[Callable[[], None]] = []
        self._state = "closed"  # then "writing" (one thread writes the inputs), "open"
        self._moved = time.monotonic()  # when an item last arrived or left
        self._cancel = cancel

    def arrive(self, send: Callable[[], None], wait_s: float) -> None:
        """Hand in `send` (writes the command's first input, or what of it fits, without
        blocking) and wait: returns once it has been called, with every other item's,
        in one loop. Waits for the others while they come, at most `wait_s` after the
        last one came (a node whose start hangs holds the rest no longer than its own
        time-out would), or until the run is cancelled; then whoever is waiting writes
        what has been handed in so far, and later ones write their own."""
        with self._cv:
            if self._state == "closed":
                self._sends.append(send)
                self._waiting -= 1
                self._moved = time.monotonic()
                while self._state == "writing" or (self._state == "closed" and self._waiting > 0
                                                   and not self._late(wait_s)):
                    self._cv.wait(GATE_POLL_S)
                if self._state == "open":
                    return
                self._state = "writing"  # this thread writes every input handed in
                sends, self._sends = self._sends, []
            else:
                while self._state == "writing":
                    self._cv.wait(GATE_POLL_S)
                sends = [send]
        try:
            self._write(sends)
        finally:
            with self._cv:
                self._state = "open"  # after the loop: nobody goes on before its input is out
                self._cv.notify_all()

    @staticmethod
    def _write(sends: list[Callable[[], None]]) -> None:
        for send in sends:
            try:
                send()
            except Exception:
                pass  # its own thread writes what this did not

    def _late(self, wait_s: float) -> bool:
        return (time.monotonic() - self._moved > wait_s
                or (self._cancel is not None and self._cancel.is_set()))

    def leave(self) -> None:
        """One item will not arrive (it returned, or its command starts some other way)."""
        with self._cv:
            self._waiting -= 1
            self._moved = time.monotonic()
            if self._waiting <= 0:
                self._cv.notify_all()  # a waiter writes the inputs, and opens the gate


class _Item(threading.local):
    gate: StartGate | None = None
    counted = True  # this item has arrived or left: it takes no further part


_item = _Item()


def start_gate() -> StartGate | None:
    """The gate of the fan-out item this thread runs, if it has not arrived or left yet;
    whoever takes it must arrive (or leave)."""
    if _item.counted:
        return None
    _item.counted = True
    return _item.gate


def stand_aside() -> None:
    """This thread's item starts its command some other way (a subprocess, a job step):
    the others need not wait for it."""
    gate = start_gate()
    if gate is not None:
        gate.leave()


def fan_out(items: Iterable, fn: Callable, limit: int,
            cancel: threading.Event | None = None) -> list:
    """fn(item) for every item, at most `limit` at once; results in item order.

    Lanes are daemon threads, each taking the next item when done with one; a new lane
    starts only when no lane is idle, so that items that end at once (an instant probe, a
    node that refuses) are run by few threads, up to `limit`. Not a ThreadPoolExecutor:
    its threads are not daemons, and Python keeps a lock for each such thread alive, which
    it scans whole each time another starts (3.11: threading._maintain_shutdown_locks),
    quadratic in a whole-fleet group, a thread a member. A lane takes another item only
    once its own has ended (arrived at the gate, or left it), so the gate never waits for
    an item that no lane can take."""
    items = list(items)
    if not items:
        return []
    gate = StartGate(len(items), cancel) if len(items) <= limit else None
    results: list = [None] * len(items)
    raised: list[tuple[int, BaseException]] = []
    todo: queue.SimpleQueue = queue.SimpleQueue()
    idle = threading.Semaphore(0)  # lanes done with an item, waiting for the next
    stop = threading.Event()  # a bug raised in fn, or the caller interrupted: run no more

    def lane() -> None:
        while (i := todo.get()) is not None and not stop.is_set():
            outer = (_item.gate, _item.counted)
            _item.gate, _item.counted = gate, gate is None
            try:
                results[i] = fn(items[i])
            except BaseException as e:  # fn must not raise: a bug, re-raised below
                raised.append((i, e))
                stop.set()
                if cancel is not None:
                    cancel.set()
            finally:
                stand_aside()
                _item.gate, _item.counted = outer
            idle.release()

    lanes: list[threading.Thread] = []
    width = max(1, min(limit, len(items)))
    try:
        for i in range(len(items)):
            todo.put(i)
            if not idle.acquire(blocking=False) and len(lanes) < width:
                lanes.append(threading.Thread(target=lane, name="burnin-fanout", daemon=True))
                lanes[-1].start()
        for _ in lanes:
            todo.put(None)
        for t in lanes:
            while t.is_alive():
                t.join(GATE_POLL_S)  # bounded: a Ctrl-C in the main thread is prompt
    except BaseException:
        stop.set()
        if cancel is not None:
            cancel.set()
        for _ in lanes:
            todo.put(None)
        deadline = time.monotonic() + CANCEL_WAIT_S
        for t in lanes:
            if t.ident is not None:
                t.join(max(0.0, deadline - time.monotonic()))
        raise
    if raised:
        raise min(raised, key=lambda r: r[0])[1]
    return results
