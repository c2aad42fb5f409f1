"""The run's connections to its nodes, held only while in use beyond the fan-out.

A transport that holds a connection to its node between commands (ssh: a paramiko
connection, its thread and socket, and the holder that keeps the node's claim) keeps it
while the run has at most `fanout` of them: a fleet within the fan-out keeps each node's
connection and claim for the whole run, as one probe's worth of waiting per check asks.
Beyond that, a node's connection is closed once it is the least recently used of the
idle ones (its claim released and its staged probes removed), and taken again, claim
and all, at its next use: at 25,000 nodes the controller holds `fanout` connections, not
25,000. A run that takes the node in between fails that node's later checks as busy
(fail closed: a skip keeps it out), as it would have at the start.

Layer 8 (with the engine): imports only the standard library and burnin.transports.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from burnin.transports import Transport


class Held:
    """The transports that hold a connection (Transport.connection_held): in use, or idle
    in least recently used order. Others are never given to it."""

    def __init__(self, fanout: int):
        self.fanout = max(1, fanout)
        self._cv = threading.Condition()
        self._idle: OrderedDict[str, Transport] = OrderedDict()
        self._using: dict[str, int] = {}
        self._closing: set[str] = set()

    def take(self, name: str) -> None:
        """Node `name` is about to be used: not closed under it until given back, and
        room made for its connection among the fan-out's before it connects."""
        with self._cv:
            # Bounded by the close's own bounds (a transport's close never hangs).
            self._cv.wait_for(lambda: name not in self._closing)
            self._idle.pop(name, None)
            self._using[name] = self._using.get(name, 0) + 1
            closing = self._beyond()
        self._close(closing)

    def give_back(self, name: str, transport: Transport) -> None:
        """Node `name` is idle again; close the least recently used idle connections
        beyond the fan-out."""
        with self._cv:
            self._drop_use(name)
            if name not in self._using:
                self._idle[name] = transport
            closing = self._beyond()
        self._close(closing)

    def _beyond(self) -> list[tuple[str, Transport]]:
        """The least recently used idle transports beyond the fan-out, marked closing."""
        closing = []
        while self._idle and len(self._idle) + len(self._using) > self.fanout:
            old, t = self._idle.popitem(last=False)
            self._closing.add(old)
            closing.append((old, t))
        return closing

    def _close(self, closing: list[tuple[str, Transport]]) -> None:
        for old, t in closing:
            try:
                t.close()  # never raises; bounded by the node's connect_timeout_s
            finally:
                with self._cv:
                    self._closing.discard(old)
                    self._cv.notify_all()

    def _drop_use(self, name: str) -> None:
        left = self._using.get(name, 0) - 1
        if left > 0:
            self._using[name] = left
        else:
            self._using.pop(name, None)

    def open_count(self) -> int:
        """Connections held now (in use or idle)."""
        with self._cv:
            return len(self._idle) + len(self._using)
