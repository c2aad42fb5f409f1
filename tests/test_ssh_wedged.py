"""A node whose sshd takes the connection and the key and then hangs:
every wait on the SSH path is bounded, so that node fails alone, with a reason that names
the hang, within about its connect_timeout_s, and the run goes on. The peers are real SSH
servers: paramiko's server side wedged on purpose (tests/support/wedgedpeer.py), and a real
OpenSSH sshd whose connection processes are stopped (SIGSTOP)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from support.replay import replay_python
from support.suiterun import SUITES, junit_cases
from support.wedgedpeer import HANGS, WedgedPeer

from burnin.engine.run import PROBES_DIR
from burnin.inventory.schema import load_inventory
from burnin.transports import NodeUnreachable
from burnin.transports.ssh import SshTransport

HANG_BOUND_S = 120  # for a hang only: the bound under test is seconds


def bounded_call(fn) -> tuple[float, object]:
    """(seconds fn took, what it returned or raised); fails the test if fn hangs."""
    box: list = []

    def call():
        t0 = time.monotonic()
        try:
            got = fn()
        except Exception as e:  # the outcome under test
            got = e
        box.append((time.monotonic() - t0, got))
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(HANG_BOUND_S)
    assert box, f"hung: no return within {HANG_BOUND_S} s"
    return box[0]


def client_key(tmp_path: Path) -> Path:
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                   check=True, capture_output=True, timeout=60)
    return key


def wedged_node_entry(peer: WedgedPeer, key: Path, known_hosts: Path,
                      timeout_s: float) -> dict:
    return {"name": "wedged", "address": "127.0.0.1", "transport": "ssh",
            "ssh": {"port": peer.port, "user": "root", "identity_file": str(key),
                    "known_hosts": str(known_hosts), "connect_timeout_s": timeout_s}}


@pytest.mark.parametrize("hang_at", HANGS)
def test_a_node_that_never_answers_fails_alone_within_its_connect_timeout(tmp_path, hang_at):
    key = client_key(tmp_path)
    with WedgedPeer(tmp_path, key.with_suffix(".pub"), hang_at) as peer:
        known = tmp_path / "known_hosts"
        known.write_text(peer.known_hosts_line + "\n")
        inv = tmp_path / "inv.yaml"
        inv.write_text(yaml.safe_dump({"version": 1, "defaults": {"gpus": 0}, "nodes": [
            wedged_node_entry(peer, key, known, 2)]}))
        t = SshTransport(load_inventory(inv).nodes[0], PROBES_DIR, "r1")
        took, got = bounded_call(t.prepare)
        assert peer.held.is_set(), "the peer must have been asked, and never answered"
        assert isinstance(got, NodeUnreachable), got
        assert (f"cannot start a command on 127.0.0.1:{peer.port}: no answer within 2 s to "
                "the start of the command that holds the node: the node's sshd or the link "
                "to it hung") in str(got), got
        assert took < HANG_BOUND_S / 2, took  # seconds; the hang bound is for a hang
        took, got = bounded_call(t.close)
        assert got is None


@pytest.mark.parametrize("wedged", ["node", "bastion"])
def test_through_a_bastion_a_wedged_node_or_bastion_fails_within_its_timeout(
        make_hosts, tmp_path, wedged):
    """ProxyJump: a node behind a real OpenSSH bastion that never answers its exec request,
    and a bastion that never answers the opening of the tunnel to a real node."""
    hosts = make_hosts(1)
    h1 = hosts[0]
    key = hosts.client_key
    gateway = f"{hosts.subnet}.1"  # the controller's address on the hosts' bridge
    if wedged == "node":  # listening where the bastion, not only the controller, reaches
        peer = WedgedPeer(tmp_path, key.with_suffix(".pub"), "exec", address=gateway)
        node = {"name": "behind", "address": gateway, "ssh": {
            "port": peer.port, "proxy_jump": f"root@{h1.address}", "connect_timeout_s": 3}}
        expected = (f"cannot start a command on {gateway}:{peer.port}: no answer within 3 s "
                    "to the start of the command that holds the node")
    else:
        peer = WedgedPeer(tmp_path, key.with_suffix(".pub"), "session")
        node = {"name": "h1", "address": h1.address, "ssh": {
            "proxy_jump": f"root@127.0.0.1:{peer.port}", "connect_timeout_s": 3}}
        expected = (f"no answer from bastion 127.0.0.1:{peer.port} within 3 s to opening a "
                    f"tunnel to {h1.address}:22")
    with peer:
        with hosts.known_hosts.open("a") as f:
            f.write(peer.known_hosts_line + "\n")
        doc = hosts.inventory()
        doc["nodes"] = [node]
        inv = tmp_path / "inv.yaml"
        inv.write_text(yaml.safe_dump(doc))
        t = SshTransport(load_inventory(inv).nodes[0], PROBES_DIR, "r1")
        took, got = bounded_call(t.prepare)
        assert peer.held.is_set(), "the peer must have been asked, and never answered"
        assert isinstance(got, NodeUnreachable) and expected in str(got), got
        took, got = bounded_call(t.close)
        assert got is None


def session_sshds(hosts, h) -> list[int]:
    """The sshd processes of h's open connections (not its listener)."""
    return [p for p in hosts.pids(h) if p != h.sshd.pid
            and Path(f"/proc/{p}/comm").read_text().strip() == "sshd"]


def test_an_openssh_node_wedged_after_staging_fails_its_probe_and_closes_bounded(
        make_hosts, tmp_path):
    """The node is held and staged, then its sshd's connection processes stop (SIGSTOP):
    the next probe's session is never opened. The probe fails within connect_timeout_s and
    the node's close (the holder's end, the hang-up) returns, bounded too. (paramiko bounds
    a session's open itself; its exec request, which it does not, is held by the wedged
    peer's test above and the run's below.)"""
    hosts = make_hosts(1)
    h = hosts[0]
    inv = hosts.write_inventory(tmp_path / "inv.yaml", ssh={"connect_timeout_s": 3})
    t = SshTransport(load_inventory(inv).nodes[0], PROBES_DIR, "r1")
    stopped = []
    try:
        took, got = bounded_call(t.prepare)
        assert got is None, got
        stopped = session_sshds(hosts, h)
        assert stopped
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        argv = t.probe_command("health")
        took, got = bounded_call(lambda: t.run(argv, b"{}", 60, 1 << 20, lifeline=True))
        assert isinstance(got, NodeUnreachable), got
        assert f"cannot start a command on {h.address}:22: no answer within 3 s to its " \
            "request" in str(got), got
        took, got = bounded_call(t.close)
        assert got is None, got
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        t.close()


def test_a_run_with_one_wedged_node_finishes_and_fails_that_node_alone(pytester, make_hosts,
                                                                      tmp_path):
    """A suite run over SSH: two healthy OpenSSH hosts and one node whose sshd never answers
    its exec request. Without the bound the run never ends (every node is staged before
    the first probe); with it, the wedged node fails with a reason naming the hang and
    the others pass."""
    hosts = make_hosts(2)
    with WedgedPeer(tmp_path, hosts.client_key.with_suffix(".pub"), "exec") as peer:
        inv = hosts.write_inventory(pytester.path / "inv.yaml",
                                    python=replay_python(pytester.path / "replay"))
        doc = yaml.safe_load(inv.read_text())
        doc["nodes"].append(wedged_node_entry(peer, hosts.client_key, hosts.known_hosts, 3))
        inv.write_text(yaml.safe_dump(doc, sort_keys=False))
        with hosts.known_hosts.open("a") as f:
            f.write(peer.known_hosts_line + "\n")
        reports = pytester.path / "reports"
        result = pytester.runpytest_subprocess(
            SUITES, "--inventory", str(inv), "--reports", str(reports),
            "-p", "no:cacheprovider", "-k", "health", timeout=HANG_BOUND_S * 4)
        assert peer.held.is_set(), "the wedged node's exec request must have come"
    cases = {node: checks["health"] for node, checks in junit_cases(reports).items()}
    assert cases["h1"] == ("passed", "") and cases["h2"] == ("passed", ""), cases
    outcome, message = cases["wedged"]
    assert outcome == "failure", cases
    assert (f"cannot start a command on 127.0.0.1:{peer.port}: no answer within 3 s to the "
            "start of the command that holds the node: the node's sshd or the link to it "
            "hung") in message, message
    result.assert_outcomes(passed=2, failed=1)
