"""SSH connections are held only while in use beyond the fan-out (burnin/engine/held.py):
a run over six real SSH test hosts at --fanout 2 never holds more than two connections
(sockets, and paramiko's thread each), between its checks as during them, and every node
passes both checks, its claim taken again at each use; a run that takes a node between
two uses makes that node's later check busy (fail closed), never this run's pass."""

from __future__ import annotations

import os
import threading
import time

from support.replay import replay_python

from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.transports.ssh import SshTransport

FANOUT = 2


def sockets() -> int:
    """This process's open sockets."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # closed since the listing
    return n


def test_a_run_wider_than_the_fanout_holds_only_fanout_connections(make_hosts, tmp_path):
    hosts = make_hosts(6)
    # The probes replay their recorded documents (tests/support/replay.py): what is
    # tested is the connections, not health's imports.
    inv = load_inventory(hosts.write_inventory(tmp_path / "inv.yaml",
                                               python=replay_python(tmp_path / "replay")))
    base_sockets, base_threads = sockets(), threading.active_count() + 1  # and the sampler
    most: dict = {"sockets": 0, "threads": 0, "names": []}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            most["sockets"] = max(most["sockets"], sockets() - base_sockets)
            if threading.active_count() - base_threads > most["threads"]:
                most["threads"] = threading.active_count() - base_threads
                most["names"] = sorted(t.name for t in threading.enumerate())
            time.sleep(0.01)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    run = Run(inv, list(inv.nodes), "quick", tmp_path / "reports", "held", fanout=FANOUT)
    try:
        for _ in range(2):  # a check, the connections between, and a check again
            outcomes = run.execute("health")
            assert all(o.ok for o in outcomes.values()), {
                n: o.reason for n, o in outcomes.items() if not o.ok}
            held = sockets() - base_sockets
            assert held <= FANOUT, f"{held} sockets held between checks at --fanout {FANOUT}"

        # Another run takes the first node while this one is not using it.
        first = inv.nodes[0]
        other = SshTransport(first, run.launch.probes_dir, "another-run")
        try:
            other.prepare()
            outcomes = run.execute("health")
        finally:
            other.close()
        assert outcomes[first.name].busy, outcomes[first.name].reason
        assert all(o.ok for n, o in outcomes.items() if n != first.name)
    finally:
        run.close()
        done.set()
        sampler.join()
    # The run's connections, and the other run's.
    assert most["sockets"] <= FANOUT + 1, (
        f"{most['sockets']} sockets at once over {len(inv.nodes)} hosts at --fanout {FANOUT}")
    # Per connection paramiko's thread and, while its handshake lasts, paramiko's timer;
    # the fan-out's lanes; the lifeline, the SSH bounds' watch and its hang-up.
    assert most["threads"] <= 3 * (FANOUT + 1) + 3, (
        f"{most['threads']} threads at once over {len(inv.nodes)} hosts at --fanout {FANOUT}: "
        f"{most['names']}")
