"""A node whose holder prints one line without end (its `ready` or its `staged` line): the
controller reads at most LINE_MAX bytes of it, fails that node with a message of bounded
length, and its memory does not grow with what the node sends. The peer is a real SSH
server (paramiko's server side, tests/support/floodpeer.py) writing as fast as loopback
takes it."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from support.floodpeer import AT, FloodPeer

from burnin.engine.run import PROBES_DIR
from burnin.inventory.schema import load_inventory
from burnin.transports import NodeUnreachable, ssh
from burnin.transports.reading import LINE_MAX, MESSAGE_MAX
from burnin.transports.ssh import SshTransport

HANG_BOUND_S = 120  # for a hang only
GROWTH_MIB = 8  # measured: 1 to 2 MiB with the limit; 21 to 43 MiB in 4 s without it


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


def _peak_growth_mib(fn) -> tuple[float, object]:
    """(how far this process's resident memory rose above its start while fn ran, in
    MiB; what fn returned or raised)."""
    Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
    before = _kib("VmRSS")
    box: list = []

    def call():
        try:
            box.append(fn())
        except Exception as e:  # the outcome under test
            box.append(e)
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(HANG_BOUND_S)
    assert box, f"hung: no return within {HANG_BOUND_S} s"
    return (_kib("VmHWM") - before) / 1024, box[0]


@pytest.mark.parametrize("at", AT)
def test_a_holder_line_without_end_fails_the_node_briefly_and_in_bounded_memory(
        tmp_path, monkeypatch, at):
    # Unbounded, the read went on until the stage time-out; a short one keeps the
    # mutant's run short and still passes tens of MiB over loopback.
    monkeypatch.setattr(ssh, "STAGE_TIMEOUT_S", 4)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                   check=True, capture_output=True, timeout=60)
    with FloodPeer(tmp_path, key.with_suffix(".pub"), at) as peer:
        known = tmp_path / "known_hosts"
        known.write_text(peer.known_hosts_line + "\n")
        inv = tmp_path / "inv.yaml"
        inv.write_text(yaml.safe_dump({"version": 1, "defaults": {"gpus": 0}, "nodes": [
            {"name": "flood", "address": "127.0.0.1", "transport": "ssh",
             "ssh": {"port": peer.port, "user": "root", "identity_file": str(key),
                     "known_hosts": str(known), "connect_timeout_s": 5}}]}))
        t = SshTransport(load_inventory(inv).nodes[0], PROBES_DIR, "r1")
        try:
            grew, got = _peak_growth_mib(t.prepare)
        finally:
            t.close()
        assert isinstance(got, NodeUnreachable), got
        message = str(got)
        assert len(message) < MESSAGE_MAX + 400, len(message)
        assert f"more than {LINE_MAX} bytes without an end of line" in message, message[:500]
        assert "more characters)" in message, message[:500]
        # The controller has read more than LINE_MAX bytes, so the peer's send has returned
        # for them; its count follows a moment later (CI once asserted in between).
        deadline = time.monotonic() + 10
        while peer.sent <= LINE_MAX and time.monotonic() < deadline:
            time.sleep(0.01)
        assert peer.sent > LINE_MAX, peer.sent
        assert grew < GROWTH_MIB, f"the controller grew by {grew:.0f} MiB"
