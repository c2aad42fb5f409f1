"""A probe's SSH channel while the probe runs (burnin/transports/ssh.py runs it): the read
loop's source of its output, and the heartbeat every running probe gets on its stdin, so
that a probe whose controller died stops itself."""

from __future__ import annotations

import select
import threading
import time

import paramiko

from burnin.transports import HEARTBEAT_S
from burnin.transports.reading import POLL_S
from burnin.transports.sshconnect import transport_of


class ChannelSource:
    """A command's SSH channel as the read loop's Source; it wakes up when `cancel` is
    set, if that can be waited on (fanout.Cancel: `wakes`)."""

    def __init__(self, chan: paramiko.Channel, client: paramiko.SSHClient, cancel=None):
        self.chan, self.client = chan, client
        self.wakes = hasattr(cancel, "fileno")
        self.waits = [chan, cancel] if self.wakes else [chan]

    def ended(self) -> bool:
        c = self.chan
        if c.recv_ready() or c.recv_stderr_ready():
            return False  # what arrived is read first, also from a channel closed since
        if c.exit_status_ready() and c.eof_received:
            return True
        return c.closed or not transport_of(self.client).is_active()

    def read(self, timeout_s: float) -> tuple[bytes, bytes]:
        c = self.chan
        if c.eof_received and not c.recv_ready() and not c.recv_stderr_ready():
            # The output is over and only the exit status is to come: paramiko leaves the
            # channel readable for good after EOF, and select() would spin until then.
            c.status_event.wait(min(timeout_s, POLL_S))
        else:
            select.select(self.waits, [], [], timeout_s)
        out, err = bytearray(), bytearray()
        while c.recv_ready():
            out += c.recv(1 << 16)
        while c.recv_stderr_ready():
            err += c.recv_stderr(1 << 16)
        return bytes(out), bytes(err)


class Lifeline:
    """Every running probe's heartbeat (see HEARTBEAT_S), from one thread for all nodes
    rather than one per probe: at 10,000 nodes, 10,000 fewer threads waking up. If the
    controller dies, sshd closes each probe's stdin and the probe stops itself; if this
    thread stalls, the probes' watchdog (WATCHDOG_S) does the same. The thread runs
    while some probe holds the lifeline."""

    def __init__(self):
        self.held: set[paramiko.Channel] = set()
        self.lock = threading.Lock()
        self.beating = False

    def hold(self, chan: paramiko.Channel) -> None:
        with self.lock:
            self.held.add(chan)
            if not self.beating:
                self.beating = True
                threading.Thread(target=_heartbeats, args=(self,), name="burnin-lifeline",
                                 daemon=True).start()

    def release(self, chan: paramiko.Channel) -> None:
        with self.lock:
            self.held.discard(chan)

    def beat(self) -> bool:
        """One heartbeat to every probe held; False (and the thread ends) when none is."""
        with self.lock:
            if not self.held:
                self.beating = False
                return False
            held = list(self.held)
        for chan in held:
            try:
                # Only into an open window: a node that stopped reading must not stall the
                # heartbeats of the others (its own probe's watchdog stops it).
                if not chan.closed and not chan.exit_status_ready() and chan.send_ready():
                    chan.send(b"\n")
            except Exception:
                pass  # its run() sees the channel end
        return True


def _heartbeats(lifeline: Lifeline) -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        if not lifeline.beat():
            return


LIFELINE = Lifeline()
