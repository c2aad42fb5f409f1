"""The SSH transport on real test hosts, where a node or its neighbours misbehave: a
staging directory someone else could swap, a login shell that talks, a link that dies
silently, a kill that cannot reach the node, and two runs after the same node."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from support.replay import replay_python
from support.suiterun import NO_HYPOTHESIS, SUITES, junit_cases, run_suite, script

from burnin.engine.run import PROBES_DIR
from burnin.inventory.schema import load_inventory
from burnin.ledger.api import Ledger
from burnin.probe.protocol import run_probe
from burnin.transports import NodeUnreachable, sshconnect
from burnin.transports.fanout import fan_out
from burnin.transports.ssh import SshTransport

# Real SSH hosts or a real Slurm cluster, or a benchmark: minutes, not seconds. CI runs
# them all; `-m "not slow"` leaves them out of a developer's quick run.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def transport(hosts, tmp_path: Path, **defaults) -> SshTransport:
    node = load_inventory(hosts.write_inventory(tmp_path / "inv.yaml", **defaults)).nodes[0]
    return SshTransport(node, PROBES_DIR, "r1")


@pytest.mark.parametrize("plant,why", [
    ("foreign", "is owned by uid 4242, not by the login user (uid 0)"),
    ("symlink", "is a symbolic link"),
    ("writable", "is writable by group or others (mode 777)"),
    ("foreign-parent", "is owned by uid 4242, neither root nor the login user"),
])
def test_a_staging_directory_another_user_could_swap_is_refused(make_hosts, tmp_path, plant,
                                                                 why):
    hosts = make_hosts(1)
    parent = tmp_path / "stage"
    parent.mkdir()
    workdir = parent / "burnin"
    if plant == "foreign":
        workdir.mkdir(mode=0o700)
        os.chown(workdir, 4242, 4242)  # another local user made it first
    elif plant == "symlink":
        (tmp_path / "elsewhere").mkdir()
        workdir.symlink_to(tmp_path / "elsewhere")
    elif plant == "writable":
        workdir.mkdir()
        workdir.chmod(0o777)
    else:
        os.chown(parent, 4242, 4242)  # they could rename our workdir away and replace it
    t = transport(hosts, tmp_path, workdir=str(workdir))
    try:
        with pytest.raises(NodeUnreachable, match="refusing to stage probes in workdir") as e:
            t.probe_command("health")
        assert why in str(e.value)
    finally:
        t.close()
    if plant == "symlink":
        assert list((tmp_path / "elsewhere").iterdir()) == [], "nothing written through it"


def test_a_chatty_login_shell_does_not_stop_a_hung_probe_being_killed(make_hosts, tmp_path):
    hosts = make_hosts(1)
    hosts.bashrc(hosts[0]).write_text("echo 'Lmod: loading cuda/12.4 nccl/2.21' >&2\n"
                                      "echo 'Welcome to the cluster' >&2\n")
    pidfile = tmp_path / "hang.pid"
    hang = script(tmp_path / "hang.sh", f"sleep 600 & echo $! > {pidfile}; wait\n")
    t = transport(hosts, tmp_path, python=hang)
    try:
        out = run_probe(t, "health", {}, timeout_s=5)
    finally:
        t.close()
    assert not out.ok and "killed at its timeout of 5 s" in out.reason, out.reason
    assert "Lmod: loading" in out.stderr_tail  # the banner came, and changed nothing
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), "the hung probe's child survived"


def test_a_link_that_dies_silently_fails_its_node_within_the_bound(pytester, make_hosts,
                                                                   tmp_path, finding,
                                                                   monkeypatch):
    # The mechanism (TCP keepalive and TCP_USER_TIMEOUT set from the bound) under a bound of
    # 6 s, not the 30 s of a real fleet: the suite runs in this process. (A healthy link on
    # this machine acknowledges within milliseconds, whatever the load.)
    bound = 6
    monkeypatch.setattr(sshconnect, "DEAD_LINK_S", bound)
    monkeypatch.setattr(sshconnect, "KEEPALIVE_S", 2)
    hosts = make_hosts(2)
    started = tmp_path / "started"
    # What is tested is the link, not the probe: recorded sdc documents, h1's at once and
    # h2's after a minute (its probe still running, lifeline held, when its link is cut).
    quick = replay_python(tmp_path / "quick")
    held = replay_python(tmp_path / "held", delay_s=60)
    py = script(tmp_path / "py", f"touch {started}-$(hostname)\n"
                f'if [ "$(hostname)" = h2 ]; then exec {held} "$@"; fi\n'
                f'exec {quick} "$@"\n')
    inv = hosts.write_inventory(pytester.path / "inv.yaml", python=py, checks={
        "sdc": {"duration_s": 20, "n": 64, "random_repeats": 2, "timeout_s": 900}})
    cut = {}

    def cut_h2():
        deadline = time.monotonic() + 120
        while not Path(f"{started}-h2").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2)
        hosts.link_down(hosts[1])  # no RST, no FIN: the link is simply gone
        cut["at"] = time.monotonic()
    cutter = threading.Thread(target=cut_h2, daemon=True)
    cutter.start()
    result, reports = run_suite(pytester, inv, "-k", "sdc")
    cutter.join()
    cases = junit_cases(reports)
    assert cases["h1"]["sdc"] == ("passed", "")
    outcome, message = cases["h2"]["sdc"]
    assert outcome == "failure" and "lost after" in message, message
    lost_after = float(message.split("lost after ")[1].split(" s")[0])
    finding(f"dead link: h2's link cut mid-probe, node failed 'connection lost' after "
            f"{lost_after:.0f} s of its probe (bound {bound} s after the cut)")
    # h2's probe would answer after 60 s: noticed before then, it was the link's bound.
    assert lost_after < 2 + 2 + bound + 20, "noticed at the probe's end, not the link's bound"


def test_a_kill_that_cannot_reach_its_node_says_so(make_hosts, tmp_path):
    hosts = make_hosts(1)
    started = tmp_path / "started"
    hang = script(tmp_path / "hang.sh", f"touch {started}; exec sleep 600\n")
    t = transport(hosts, tmp_path, python=hang, ssh={"connect_timeout_s": 2})

    def cut():
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        hosts.link_down(hosts[0])
    threading.Thread(target=cut, daemon=True).start()
    try:
        out = run_probe(t, "health", {}, timeout_s=6)
    finally:
        t.close()
    assert not out.ok
    assert "passed its timeout of 6 s and could not be killed" in out.reason, out.reason


def test_a_second_run_skips_nodes_under_test_as_busy_and_blames_nobody(pytester, make_hosts,
                                                                       tmp_path):
    """Busy is not a fault: the second run neither quarantines the nodes the first is
    testing nor runs its hook for them, reports them skipped (not admitted), and the first
    run's verdicts stand."""
    hosts = make_hosts(2)
    # The first run's probes hold the nodes for 8 s (recorded documents, tests/support/replay.py,
    # answered after a delay): long enough for the second run to meet them.
    first_inv = hosts.write_inventory(tmp_path / "first.yaml",
                                      python=replay_python(tmp_path / "slow", delay_s=8))
    reports = tmp_path / "first-reports"
    first = subprocess.Popen([sys.executable, "-m", "pytest", SUITES, "--inventory",
                              str(first_inv), "--reports", str(reports), "-k", "sdc",
                              "-p", "no:cacheprovider", "-q"], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env={**os.environ, **NO_HYPOTHESIS})
    try:
        remote = Path(hosts.inventory()["defaults"]["workdir"])
        deadline = time.monotonic() + 120
        while len(list(remote.glob("burnin-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        inv = hosts.write_inventory(pytester.path / "inv.yaml")
        hook_log = tmp_path / "hook.log"
        hook = script(tmp_path / "hook.sh", f"echo \"$@\" >> {hook_log}\n")
        doc = yaml.safe_load(inv.read_text())
        doc["quarantine"] = {"ledger": str(tmp_path / "second.db"), "actions": ["command"],
                             "command": [hook, "{node}"]}
        inv.write_text(yaml.safe_dump(doc))
        Ledger(tmp_path / "second.db")  # burnin ledger init: a run never creates one
        result, second = run_suite(pytester, inv, "-k", "health")
        cases = junit_cases(second)
        for h in hosts.hosts:
            outcome, message = cases[h.name]["health"]
            assert outcome == "skipped" and message.startswith("busy: under test by run "), \
                message
            assert " since " in message
        assert not hook_log.exists(), hook_log.read_text()
        assert Ledger(tmp_path / "second.db").quarantined() == set()
        admitted = subprocess.run([sys.executable, "-m", "burnin", "admit",
                                   str(second / "latest" / "junit.xml")],
                                  capture_output=True, text=True, timeout=60)
        assert admitted.returncode == 1 and "health: skipped: busy: under test by run" in \
            admitted.stdout, admitted.stdout + admitted.stderr
    finally:
        out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out.decode()[-3000:]
    assert junit_cases(reports) == {h.name: {"sdc": ("passed", "")} for h in hosts.hosts}


def test_nodes_behind_a_bastion_are_reached_through_it(pytester, make_hosts):
    hosts = make_hosts(3)
    bastion, *behind = hosts.hosts
    for h in behind:
        hosts.only_via(h, bastion)
    jump = {"ssh": {"proxy_jump": f"root@{bastion.address}"}}
    # The probes replay their recorded documents (tests/support/replay.py), stamped with
    # the hostname where they ran: what is tested is the way in, not health's imports.
    replay = replay_python(pytester.path / "replay")
    inv = hosts.write_inventory(pytester.path / "inv.yaml", python=replay,
                                nodes={h.name: jump for h in behind})
    result, reports = run_suite(pytester, inv, "-k", "health")
    assert junit_cases(reports) == {h.name: {"health": ("passed", "")} for h in hosts.hosts}
    records = (reports / "latest" / "results.jsonl").read_text()
    assert '"hostname": "h2"' in records and '"hostname": "h3"' in records
    # Without the jump they cannot be reached at all: the bastion is the only way in.
    short = {"ssh": {"connect_timeout_s": 3}}  # only where "no answer" is expected
    direct = hosts.write_inventory(pytester.path / "direct.yaml", python=replay,
                                   nodes={h.name: short for h in behind})
    result, reports = run_suite(pytester, direct, "-k", "health", "--no-quarantine")
    cases = junit_cases(reports)
    assert cases["h1"]["health"] == ("passed", "")
    for h in behind:
        assert "no answer from" in cases[h.name]["health"][1], cases[h.name]


def test_a_probe_that_never_reads_large_settings_does_not_hang_its_node(make_hosts, tmp_path):
    """The settings go out from the calling thread: a probe that prints its document and
    exits without reading 4 MB of them (more than the channel's window) ends the wait,
    and its document is read."""
    hosts = make_hosts(1)
    doc = REPO / "tests" / "corpus" / "health.cpu.json"
    t = transport(hosts, tmp_path, python=script(tmp_path / "py", f"exec cat {doc}\n"))
    try:
        out = run_probe(t, "health", {"blob": "y" * (4 << 20)}, timeout_s=120, lifeline=True)
    finally:
        t.close()
    assert out.ok, out.reason


def test_a_probe_that_never_reads_its_settings_does_not_hold_the_others(make_hosts,
                                                                        tmp_path):
    """The settings go out from one loop for all nodes (the fan-out's start gate): only
    what fits a node's window goes from there, never waiting; h1's probe neither reads its
    4 MB of settings (more than the window) nor exits, and h2's still gets all of its own
    and answers while h1's runs on."""
    hosts = make_hosts(2)
    doc = REPO / "tests" / "corpus" / "health.cpu.json"
    py = script(tmp_path / "py", f'if [ "$(hostname)" = h1 ]; then exec sleep 600; fi\n'
                f"head -n 1 > /dev/null\nexec cat {doc}\n")
    # h1's settings wait for its window until its connect_timeout_s (the hosts' 30 s, for a
    # loaded machine's handshakes) even once the run is cancelled: the product's default
    # here, or h1 would end half a minute after h2 answered.
    inv = hosts.write_inventory(tmp_path / "inv.yaml", python=py,
                                nodes={"h1": {"ssh": {"connect_timeout_s": 10}}})
    nodes = load_inventory(inv).nodes
    ts = [SshTransport(n, PROBES_DIR, "r1") for n in nodes]
    cancel = threading.Event()
    answered = {}

    def one(t):
        out = run_probe(t, "health", {"blob": "y" * (4 << 20)}, timeout_s=120,
                        lifeline=True, cancel=cancel)
        answered[t.node.name] = (out, cancel.is_set())
        if t.node.name == "h2":
            cancel.set()  # h1's probe is killed only now
        return out
    run = threading.Thread(target=fan_out, args=(ts, one, 2, cancel), daemon=True)
    run.start()
    try:
        deadline = time.monotonic() + 300  # a hang: h2's settings held behind h1's window
        while "h2" not in answered and time.monotonic() < deadline:
            time.sleep(0.1)
        cancel.set()
        run.join(60)
    finally:
        for t in ts:
            t.close()
    assert "h2" in answered, "h2's probe never answered"
    out, cancelled = answered["h2"]
    assert out.ok and not cancelled, out.reason
    out, _ = answered["h1"]
    assert not out.ok and "the run was interrupted" in out.reason, out.reason
