"""The launch layer (burnin/launch.py, burnin/transports/fanout.py): the one fan-out
returns every item's result and, interrupted, cancels what runs before it re-raises; a
cancelled run starts nothing; a bug of ours in a launcher is a controller fault for the
nodes it held, never a node's failure."""

from __future__ import annotations

import threading
import time

import pytest

from burnin.checks import CHECKS
from burnin.launch import NOT_STARTED, Launch
from burnin.nodes import Node
from burnin.run import PROBES_DIR
from burnin.transports import Launcher
from burnin.transports.fanout import fan_out

HEALTH = CHECKS["health"]


def test_every_items_result_comes_back_in_item_order():
    assert fan_out(range(20), lambda i: i * i, limit=3) == [i * i for i in range(20)]
    assert fan_out([], lambda i: i, limit=3) == []


def test_an_interrupt_cancels_what_runs_and_waits_for_it_before_it_is_raised():
    cancel = threading.Event()
    ended = []

    def fn(i):
        if i == 0:
            time.sleep(0.2)  # the others are running by now
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
