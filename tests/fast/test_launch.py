"""The launch layer (burnin/engine/launch.py, burnin/transports/fanout.py): the one fan-out
returns every item's result and, interrupted, cancels what runs before it re-raises; a
cancelled run starts nothing; a bug of ours in a launcher is a controller fault for the
nodes it held, never a node's failure."""

from __future__ import annotations

import threading

import pytest

from burnin.checks import CHECKS
from burnin.engine.launch import NOT_STARTED, Launch
from burnin.engine.run import PROBES_DIR
from burnin.model.nodes import Node
from burnin.transports import Launcher
from burnin.transports.fanout import fan_out

HEALTH = CHECKS["health"]


def test_every_items_result_comes_back_in_item_order():
    assert fan_out(range(20), lambda i: i * i, limit=3) == [i * i for i in range(20)]
    assert fan_out([], lambda i: i, limit=3) == []


def test_an_interrupt_cancels_what_runs_and_waits_for_it_before_it_is_raised():
    cancel = threading.Event()
    ended = []
    running = threading.Barrier(4, timeout=60)  # every item has started

    def fn(i):
        running.wait()
        if i == 0:
            raise KeyboardInterrupt  # as Ctrl-C lands in the waiting thread
        cancel.wait(60)  # a probe's command, killed when the run is cancelled
        ended.append(i)
        return i

    with pytest.raises(KeyboardInterrupt):
        fan_out(range(4), fn, limit=4, cancel=cancel)
    assert cancel.is_set() and sorted(ended) == [1, 2, 3]


def local_nodes(n: int) -> list[Node]:
    return [Node(name=f"n{i}", address=f"n{i}", transport="local", gpus=0)
            for i in range(1, n + 1)]


def test_a_cancelled_run_starts_no_probe(tmp_path):
    launch = Launch(local_nodes(1), PROBES_DIR, "r1")
    launch.cancel.set()
    o = launch.probe(launch.nodes[0], HEALTH, {}, timeout_s=60)
    assert (o.ok, o.reason, o.fault) == (False, NOT_STARTED, False)
    launch.close()


class Broken(Launcher):
    def run(self, *args, **kwargs):
        raise RuntimeError("a bug of ours")


def test_a_bug_in_a_launcher_is_a_controller_fault_of_its_nodes_only():
    nodes = local_nodes(2)
    launch = Launch(nodes, PROBES_DIR, "r1")
    out = launch.probe_together(Broken(), nodes, HEALTH, {n.name: {} for n in nodes},
                                {n.name: 60.0 for n in nodes})
    assert {o.node for o in out.values()} == {"n1", "n2"}
    assert all(o.fault and "controller error running health: RuntimeError: a bug of ours"
               in o.reason for o in out.values())


def test_the_launch_fan_out_runs_every_item_in_lanes_within_its_bound():
    launch = Launch(local_nodes(1), PROBES_DIR, "r1", fanout=4)
    running, most, lock = [0], [0], threading.Lock()
    threads = set()
    four = threading.Barrier(4, timeout=60)  # the first four items run at once: 4 lanes

    def fn(i):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            threads.add(threading.get_ident())
        if i < 4:
            four.wait()
        with lock:
            running[0] -= 1
        return i * i

    assert launch.fan_out(range(50), fn) == [i * i for i in range(50)]
    assert most[0] == 4 and len(threads) == 4, "50 items, 4 lanes: no more at once"
    # A cancelled run still gets each item's own result (Launch.probe: not started).
    launch.cancel.set()
    assert launch.fan_out(range(9), lambda i: -i) == [-i for i in range(9)]


def test_at_once_from_a_group_thread_starts_every_item_together():
    launch = Launch(local_nodes(1), PROBES_DIR, "r1")
    n = 6
    together = threading.Barrier(n, timeout=60)  # passes only when all n wait at once

    def member(i):
        together.wait()
        return i + 1

    out = []
    t = threading.Thread(target=lambda: out.append(launch.at_once(list(range(n)), member)))
    t.start()
    t.join(120)
    assert out == [[i + 1 for i in range(n)]]

    def broken(i):
        if i == 2:
            raise RuntimeError("a bug of ours")
        return i
    raised = []

    def group():
        try:
            launch.at_once([0, 1, 2, 3], broken)
        except RuntimeError as e:
            raised.append(str(e))
    t = threading.Thread(target=group)
    t.start()
    t.join(120)
    assert raised == ["a bug of ours"], "a bug in a member is raised, as fan_out raises it"
