"""A bound on every SSH wait that paramiko itself leaves unbounded.

paramiko bounds some of its waits (the TCP connect, the banner, each authentication
request, opening a channel) but not others: `Channel.exec_command` waits for the node's
answer with no time-out at all, a write into a connection whose peer stopped reading
retries until the connection is closed, and its handshake bounds each step rather than
the whole. A node whose sshd accepts the connection and the key and then never answers
would hold the whole run forever.

Each such wait runs inside `bounded(seconds, hang_up)`: if it has not ended by then, one
thread (for all nodes, as the lifeline is) calls `hang_up`, which closes that node's
connection. Closing it wakes every paramiko wait on it (they raise), and the caller,
seeing `Bound.expired`, fails the node with its own reason. Only the node that hung
loses its connection; the run goes on. docs/reference/ssh-bounds.md lists every wait and its bound.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field


@dataclass(eq=False)
class Bound:
    """One bounded wait: mutable, since the watch marks it when it expires."""

    seconds: float
    hang_up: Callable[[], None]
    deadline: float = 0.0
    done: bool = False
    expired: bool = False  # the wait outlived its bound and its connection was hung up
    _order: int = field(default=0, repr=False)


class Watch:
    """Every bounded wait of the process, watched by one thread that sleeps until the
    earliest deadline: a bound costs a heap push and a pop, not a thread or a timer."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, Bound]] = []
        self._count = itertools.count()
        self._thread: threading.Thread | None = None

    def start(self, bound: Bound) -> None:
        bound.deadline = time.monotonic() + bound.seconds
        with self._cv:
            heapq.heappush(self._heap, (bound.deadline, next(self._count), bound))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="burnin-ssh-bounds",
                                                daemon=True)
                self._thread.start()
            elif self._heap[0][2] is bound:
                self._cv.notify()  # a new earliest deadline: the thread sleeps less

    def end(self, bound: Bound) -> None:
        # Left in the heap, marked: its entry is dropped when it comes up (cheaper than
        # removing it from the middle of the heap).
        bound.done = True

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cv.wait()
                    continue
                deadline, _, bound = self._heap[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                heapq.heappop(self._heap)
                bound.expired = True
            # In a thread of its own: closing a connection may itself wait (a proxied
            # connection's close is a message to the bastion), and the watch must not.
            threading.Thread(target=_quietly, args=(bound.hang_up,), daemon=True,
                             name="burnin-ssh-hang-up").start()


def _quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        pass  # the connection is closing anyway; the wait it held has raised or will


WATCH = Watch()


@contextmanager
def bounded(seconds: float, hang_up: Callable[[], None]) -> Iterator[Bound]:
    """Run the block with its waits bounded to `seconds`: past them, `hang_up()` closes
    the connection the block waits on, which makes it raise. The block's caller looks at
    `.expired` to tell that from the node's own error."""
    bound = Bound(seconds, hang_up)
    WATCH.start(bound)
    try:
        yield bound
    finally:
        WATCH.end(bound)


def within(bound: AbstractContextManager, fn: Callable[[], object]) -> None:
    """fn() inside `bound` (one of bounded()'s), never raising: for a close, which is a
    message to the node, and which a hung-up connection has nothing left to do."""
    try:
        with bound:
            fn()
    except Exception:
        pass
