"""The fan-out's start gate (burnin/transports/fanout.py): the commands of one fan-out get
their first input in one loop once every item has started or left; an item that leaves,
hangs or is cancelled holds the others no longer than its bound. Times here bound hangs
only: nothing depends on how fast this machine is."""

from __future__ import annotations

import select
import threading
import time

from burnin.model.nodes import Node
from burnin.probe.protocol import run_probe, run_probes
from burnin.transports import CommandResult
from burnin.transports.fanout import GATE_POLL_S, Cancel, fan_out, stand_aside, start_gate

HANG_S = 60.0  # a test that waits this long has hung


class Events(list):
    """What the items did, in order; a test waits on it for what it expects (woken at
    each event, never sleeping a guessed time), for at most HANG_S / 2."""

    def __init__(self):
        super().__init__()
        self.cv = threading.Condition()

    def append(self, event) -> None:
        with self.cv:
            super().append(event)
            self.cv.notify_all()

    def wait_for(self, ready, what: str) -> None:
        with self.cv:
            assert self.cv.wait_for(lambda: ready(self), HANG_S / 2), f"hung: {what}"

    def of(self, kind) -> int:
        return len([e for e in self if e[0] == kind])


def started(events: Events, wait_s: float = HANG_S):
    """An item that starts its command (noted), then hands the gate its input's write."""
    def fn(i):
        gate = start_gate()
        if gate is None:
            events.append(("alone", i))
            return i
        events.append(("started", i))
        gate.arrive(lambda: events.append(("sent", i, threading.get_ident())), wait_s)
        events.append(("on", i))
        return i
    return fn


def test_every_input_is_written_in_one_loop_once_every_command_has_started():
    events = Events()
    run = started(events)

    def fn(i):
        if i:  # items start one after the other: 0 is first, 7 last
            events.wait_for(lambda ev: ("started", i - 1) in ev, f"item {i - 1} started")
        return run(i)

    assert fan_out(range(8), fn, limit=8) == list(range(8))
    kinds = [e[0] for e in events]
    assert kinds.index("sent") > max(i for i, k in enumerate(kinds) if k == "started")
    assert kinds.index("on") > max(i for i, k in enumerate(kinds) if k == "sent")
    sent = [e for e in events if e[0] == "sent"]
    assert sorted(e[1] for e in sent) == list(range(8))
    assert len({e[2] for e in sent}) == 1  # one thread, one loop


def test_items_that_return_or_stand_aside_do_not_hold_the_others():
    events = Events()
    run = started(events)
    aside = threading.Event()

    def fn(i):
        if i == 0:
            return "no command"  # returns (a node that could not be reached)
        if i == 1:
            stand_aside()  # a command started some other way (a subprocess)
            aside.wait(HANG_S)  # ... that runs long: the others do not wait for it
            return "aside"
        return run(i)

    done = threading.Thread(target=fan_out, args=(range(4), fn, 4), daemon=True)
    done.start()
    events.wait_for(lambda ev: ev.of("on") >= 2, "items 2 and 3 went on")
    assert sorted(e[1] for e in events if e[0] == "on") == [2, 3]  # item 1 still runs
    aside.set()
    done.join(HANG_S)


def test_an_item_that_never_arrives_holds_the_others_only_its_bound():
    wait_s = 0.5
    events = Events()
    run = started(events, wait_s=wait_s)
    release = threading.Event()

    def fn(i):
        if i == 0:
            release.wait(HANG_S)  # its start hangs
            return run(i)
        return run(i)

    t = threading.Thread(target=fan_out, args=(range(3), fn, 3), daemon=True)
    t.start()
    events.wait_for(lambda ev: ev.of("started") >= 2, "items 1 and 2 started")
    arrived = time.monotonic()  # the last of them arrives just after it says started
    events.wait_for(lambda ev: ev.of("on") >= 2, "items 1 and 2 went on")
    held = time.monotonic() - arrived
    assert sorted(e[1] for e in events if e[0] == "on") == [1, 2]
    # Its bound, and the gate's poll, then a margin for a loaded machine: far under what
    # a bound many times too long would hold them (20 x 0.5 s).
    assert held < wait_s + GATE_POLL_S + 3.0, f"held {held:.1f} s past the bound of {wait_s} s"
    release.set()  # the late one writes its own input and goes on
    t.join(HANG_S)
    assert ("sent", 0) in [e[:2] for e in events] and ("on", 0) in events


def test_a_cancelled_run_opens_the_gate():
    events = Events()
    cancel = threading.Event()
    run = started(events)
    release = threading.Event()

    def fn(i):
        if i == 0:
            release.wait(HANG_S)
            return i
        return run(i)

    t = threading.Thread(target=fan_out, args=(range(3), fn, 3, cancel), daemon=True)
    t.start()
    events.wait_for(lambda ev: ev.of("started") >= 2, "items 1 and 2 started")
    assert not [e for e in events if e[0] == "sent"]  # held for item 0
    cancel.set()
    events.wait_for(lambda ev: ev.of("on") >= 2, "the cancel opened the gate")
    assert sorted(e[1] for e in events if e[0] == "on") == [1, 2]
    release.set()
    t.join(HANG_S)


def test_a_fan_out_wider_than_its_bound_has_no_gate_and_nested_ones_their_own():
    events = Events()
    assert fan_out(range(4), started(events), limit=2) == list(range(4))
    assert sorted(e[1] for e in events if e[0] == "alone") == [0, 1, 2, 3]

    inner = Events()

    def outer(i):
        # A fan-out inside an item (the run's first probe readies every node) has its
        # own gate; the item's own gate is still there for its command afterwards.
        fan_out(range(2), started(inner), limit=2)
        return started(events)(i)

    events.clear()
    assert fan_out(range(2), outer, limit=2) == [0, 1]
    assert sorted(e[1] for e in inner if e[0] == "sent") == [0, 0, 1, 1]
    assert sorted(e[1] for e in events if e[0] == "sent") == [0, 1]


def test_the_gate_is_taken_once_per_item():
    got = []

    def fn(i):
        got.append(start_gate() is not None)
        got.append(start_gate() is not None)  # a second command of the item: no gate
        return i

    fan_out(range(2), fn, limit=2)
    assert sorted(got) == [False, False, True, True]


def test_the_runs_cancel_wakes_a_select_when_it_is_set():
    """A read loop sleeps in select() on its channel and the run's cancel: a cancel that
    did not wake it would be noticed only at the loop's backstop (ssh.IDLE_POLL_S)."""
    cancel = Cancel()
    assert select.select([cancel], [], [], 0)[0] == []
    threading.Timer(0.2, cancel.set).start()
    assert select.select([cancel], [], [], HANG_S)[0] == [cancel] and cancel.is_set()
    cancel.set()  # twice is as once
    assert select.select([cancel], [], [], 0)[0] == [cancel]


class Otherwise:
    """A transport (local: a subprocess) or a launcher (srun: a job step) that starts its
    command its own way, and runs until released; duck-typed, as a test's transport may be
    (no starts_together: it does not wait at the gate)."""

    def __init__(self):
        self.node = Node("n1", "n1")
        self.release = threading.Event()

    def probe_command(self, probe):
        return ["python3", f"probes/{probe}.py"]

    def run(self, *args, **kwargs):
        self.release.wait(HANG_S)
        result = CommandResult(0, b"", b"", 0.0)
        return {"n1": [result]} if isinstance(args[0], list) and args[0] and \
            isinstance(args[0][0], Node) else result


def test_probes_started_otherwise_stand_aside_and_hold_no_ssh_probe():
    for start in (lambda o: run_probe(o, "health", {}, 60),
                  lambda o: run_probes(o, [o.node], "health", {"n1": {}}, {"n1": 60})):
        events = Events()
        other = Otherwise()

        def fn(i, other=other, start=start, events=events):
            return start(other) if i == 0 else started(events)(i)
        t = threading.Thread(target=fan_out, args=(range(2), fn, 2), daemon=True)
        t.start()
        # while item 0's command still runs
        events.wait_for(lambda ev: ("on", 1) in ev, "item 1 went on")
        other.release.set()
        t.join(HANG_S)


class Together(Otherwise):
    """A transport that waits at the gate itself (ssh): run_probe leaves the gate to it."""

    starts_together = True

    def run(self, *args, **kwargs):
        self.gate = start_gate()
        if self.gate is not None:
            self.gate.arrive(lambda: None, HANG_S)
        return CommandResult(0, b"", b"", 0.0)


def test_a_probe_through_a_transport_that_starts_together_takes_the_gate_itself():
    transports = [Together(), Together()]
    fan_out(range(2), lambda i: run_probe(transports[i], "health", {}, 60), 2)
    assert all(t.gate is not None for t in transports)
    alone = Together()
    run_probe(alone, "health", {}, 60)  # outside a fan-out: no gate
    assert alone.gate is None
