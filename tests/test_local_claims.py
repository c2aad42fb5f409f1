"""The local transport's claims (burnin/transports/claims.py): one run at a time on a node,
a dead run's claim taken over at once, and no descriptor held per node."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from burnin.model.nodes import Node
from burnin.transports import NodeBusy, claims
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent

# Another run, in its own process: claims the nodes named on its command line, says
# "held" (or what was busy), then holds them until its stdin closes.
OTHER_RUN = textwrap.dedent("""
    import sys
    from burnin.transports import NodeBusy, claims
    workdir, run_id, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    busy = []
    for name in names:
        try:
            claims.claim(workdir, name, run_id)
        except NodeBusy:
            busy.append(name)
    print("held", *busy, flush=True)
    sys.stdin.read()
    """)


def other_run(workdir: Path, run_id: str, *names: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", OTHER_RUN, str(workdir), run_id, *names],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("held"), "the other run did not start"
    return proc


def end(proc: subprocess.Popen) -> None:
    proc.communicate(timeout=30)


def node(tmp_path: Path, name: str = "n1") -> Node:
    return Node(name=name, address=name, transport="local", workdir=str(tmp_path / "w"))


def test_a_node_another_run_holds_is_busy_saying_who_and_since_when(tmp_path):
    other = other_run(tmp_path / "w", "first", "n1")
    try:
        t = LocalTransport(node(tmp_path), tmp_path, run_id="second")
        holders = claims.held_descriptors()
        with pytest.raises(NodeBusy, match=r"^busy: under test by run first since .+ on "):
            t.probe_command("health")
        assert claims.held_descriptors() == holders, "a busy node left a holder open"
        t.close()
    finally:
        end(other)


def test_the_same_run_in_another_process_goes_on(tmp_path):
    """A pytest-xdist worker of the same run shares the node with the others."""
    other = other_run(tmp_path / "w", "run1", "n1")
    try:
        t = LocalTransport(node(tmp_path), tmp_path, run_id="run1")
        assert t.probe_command("health")[-1].endswith("health.py")
        t.close()
    finally:
        end(other)


def test_a_killed_runs_claim_is_taken_over_at_once(tmp_path):
    other = other_run(tmp_path / "w", "crashed", "n1")
    other.send_signal(signal.SIGKILL)
    other.wait(timeout=30)
    t = LocalTransport(node(tmp_path), tmp_path, run_id="next")
    try:
        t.probe_command("health")  # not busy: its holder died with its flock
    finally:
        t.close()
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == [".claims.lock"], \
        "a dead holder's file, or a released claim's record, was left behind"


def test_a_closed_transport_gives_its_node_back(tmp_path):
    t = LocalTransport(node(tmp_path), tmp_path, run_id="first")
    t.probe_command("health")
    t.close()
    other = subprocess.run([sys.executable, "-c", OTHER_RUN, str(tmp_path / "w"), "second",
                            "n1"], input="", capture_output=True, text=True, cwd=REPO,
                           timeout=60)
    assert other.stdout.split() == ["held"], other.stdout + other.stderr


def test_two_runs_racing_for_the_same_nodes_never_both_take_one(tmp_path):
    names = [f"n{i}" for i in range(300)]
    script = OTHER_RUN.replace('print("held", *busy, flush=True)',
                               'print("held", *busy, flush=True); import os; os.close(1)')
    runs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "w"), run, *names],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             cwd=REPO) for run in ("a", "b")]
    try:
        got = [set(r.stdout.read().split()[1:]) for r in runs]  # type: ignore[union-attr]
    finally:
        for r in runs:
            end(r)
    # Every node busy for exactly one of the two: taken by one run, refused to the other.
    assert got[0] | got[1] == set(names) and not got[0] & got[1], (len(got[0]), len(got[1]))


def test_a_node_held_over_ssh_in_the_same_workdir_is_busy(tmp_path):
    """A run that reaches this machine over SSH holds the node with the SSH transport's
    lock file (burnin/transports/nodeside.py) in the same workdir."""
    (tmp_path / "w").mkdir(mode=0o700)
    fd = os.open(tmp_path / "w" / ".lock-n1", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"run over-ssh since 2026-11-28 04:00:00 UTC on elsewhere")
        t = LocalTransport(node(tmp_path), tmp_path, run_id="local")
        with pytest.raises(NodeBusy, match="under test by run over-ssh since "):
            t.probe_command("health")
    finally:
        os.close(fd)
    t.probe_command("health")  # the SSH run ended: free
    t.close()


def test_claims_hold_no_descriptor_per_node(tmp_path):
    def under_workdir() -> int:
        """This process's descriptors open on the claims' workdir: the test's own files
        alone, whatever other threads of the worker open or close meanwhile."""
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                n += os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path))
            except OSError:
                pass  # closed between the listing and the look
        return n

    holders = claims.held_descriptors()
    held = [LocalTransport(node(tmp_path, f"n{i}"), tmp_path, run_id="many")
            for i in range(2000)]
    try:
        for t in held:
            t.probe_command("health")
        assert under_workdir() <= 2
        assert claims.held_descriptors() == holders + 1
    finally:
        for t in held:
            t.close()
    assert under_workdir() == 0, "a claim's descriptor outlived it"
    assert claims.held_descriptors() == holders
