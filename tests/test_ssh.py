"""The ssh transport against real OpenSSH test hosts, with every node failure planted."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families
from support.replay import replay_python
from support.suiterun import CHECKS, junit_cases, run_suite, script

from burnin.engine.run import PROBES_DIR, Run
from burnin.inventory.schema import load_inventory
from burnin.probe.protocol import run_probe
from burnin.transports.ssh import SshTransport


def test_suite_passes_over_ssh_on_four_hosts(pytester, make_hosts):
    """Every check over SSH: staged probes (the recorded ones of tests/support/replay.py, which
    import the staged probelib and keep the real lifeline), on each host in its own
    namespaces. The real probes over SSH: test_one_connection_per_node_... (health, twice),
    test_each_node_failure_... (h10's Debian Python, without torch), and the bastion's
    (tests/test_transport_safety.py)."""
    hosts = make_hosts(4)
    inv = hosts.write_inventory(pytester.path / "inv.yaml",
                                python=replay_python(pytester.path / "replay"))
    result, reports = run_suite(pytester, inv)
    result.assert_outcomes(passed=4 * len(CHECKS))
    passed = ("passed", "")
    assert junit_cases(reports) == {h.name: dict.fromkeys(CHECKS, passed) for h in hosts.hosts}
    records = [json.loads(ln) for ln in (reports / "latest" / "results.jsonl").open()
               if '"check": "health"' in ln]
    # Each probe ran on its own host: the hostname comes from the host's UTS namespace.
    assert {r["node"]: r["data"]["node"]["hostname"] for r in records} == {
        h.name: h.name for h in hosts.hosts}
    remote = Path(hosts.inventory()["defaults"]["workdir"])
    # Only the nodes' lock files stay (removing a lock file races with its next taker).
    assert sorted(p.name for p in remote.iterdir()) == [f".lock-{h.name}" for h in hosts.hosts], \
        "staged probes must be removed at the end"


def test_each_node_failure_fails_that_node_alone_with_its_reason(pytester, make_hosts,
                                                                 tmp_path):
    hosts = make_hosts(11)
    h = {host.name: host for host in hosts.hosts}
    wrong_key = tmp_path / "wrong_key"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {wrong_key}")
    hang_pid = tmp_path / "hang.pid"
    started = tmp_path / "started"
    nodes = {
        # h1, h2: healthy
        "h3": {},  # sshd stopped: connection refused
        "h4": {"ssh": {"connect_timeout_s": 3}},  # link down: no answer within it
        "h5": {},  # host key changed: known_hosts holds another key
        "h6": {},  # host key unknown: not in known_hosts
        "h7": {"ssh": {"identity_file": str(wrong_key)}},  # authentication refused
        # Only the hung host gets a short timeout: healthy probes keep the profile's,
        # so that a loaded machine cannot fail them.
        "h8": {"python": script(tmp_path / "hang.sh",
                                f"sleep 600 & echo $! > {hang_pid}; wait\n"),
               "checks": {"health": {"timeout_s": 5}}},
        "h9": {"python": "/nonexistent/python3"},
        "h10": {"python": "/usr/bin/python3"},  # Debian's Python: no torch
        "h11": {"python": script(tmp_path / "slow.sh",
                                 f"touch {started}; sleep 30; exec {sys.executable} \"$@\"\n")},
    }
    # The healthy nodes' probes replay their recorded documents (tests/support/replay.py):
    # what is tested is each failure's reason, and that it stays its node's.
    inv = hosts.write_inventory(pytester.path / "inv.yaml", nodes=nodes,
                                python=replay_python(tmp_path / "replay"))
    hosts.stop_sshd(h["h3"])
    hosts.link_down(h["h4"])
    h["h5"].host_key_line = h["h5"].host_key_line.rsplit(" ", 1)[0] + " " + \
        h["h6"].host_key_line.rsplit(" ", 1)[1]
    hosts.write_known_hosts(skip=(h["h6"],))

    def kill_sshd_mid_probe():
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        hosts.kill_all_sshd(h["h11"])
    killer = threading.Thread(target=kill_sshd_mid_probe, daemon=True)
    killer.start()

    result, reports = run_suite(pytester, inv, "-k", "health")
    killer.join()
    cases = {node: checks["health"] for node, checks in junit_cases(reports).items()}
    expected = {
        "h1": "", "h2": "",
        "h3": "connection refused by",
        "h4": "no answer from",
        "h5": "host key CHANGED for",
        "h6": "host key of",
        "h7": "authentication refused by",
        "h8": "killed at its timeout of 5 s",
        "h9": "could not start: interpreter or probe not found",
        "h10": "torch is not importable on the node",
        "h11": "lost after",
    }
    for node, fragment in expected.items():
        outcome, message = cases[node]
        if fragment:
            assert outcome == "failure" and fragment in message, (node, message)
        else:
            assert outcome == "passed", (node, message)
    assert "ssh-keyscan -p 22" in cases["h6"][1]
    assert "ssh-keygen -R" in cases["h5"][1]
    # The probe's whole remote process group died at the timeout, its child too.
    pid = int(hang_pid.read_text())
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}"), "the hung probe's child survived"
    result.assert_outcomes(passed=2, failed=9)
    # The run's reports show each failure: linked from the page to its evidence folder.
    run_dir = (reports / "latest").resolve()
    page = (run_dir / "summary.html").read_text()
    for node in ("h3", "h8", "h11"):
        assert f"<tr id='node-{node}'>" in page and f"nodes/{node}/verdicts.txt" in page
        assert "connection refused" in (run_dir / "nodes" / "h3" / "verdicts.txt").read_text()
    families = {f.name: f for f in text_string_to_metric_families(
        (run_dir / "metrics.prom").read_text())}
    passed = {s.labels["node"]: s.value for s in families["burnin_check_passed"].samples}
    assert passed["h1"] == 1 and passed["h3"] == 0


def test_one_connection_per_node_and_probes_staged_once_in_a_private_dir(make_hosts,
                                                                         tmp_path):
    hosts = make_hosts(1)
    # The probe replays its recorded document (tests/support/replay.py): what is tested
    # is the staging and the connection, not health's imports.
    inv_path = hosts.write_inventory(tmp_path / "inv.yaml",
                                     python=replay_python(tmp_path / "replay"))
    node = load_inventory(inv_path).nodes[0]
    t = SshTransport(node, PROBES_DIR)
    try:
        first = t.probe_command("health")
        client = t._client
        staged = Path(first[1]).parent
        assert stat.S_IMODE(staged.stat().st_mode) == 0o700
        assert sorted(p.name for p in staged.iterdir()) == sorted(
            p.name for p in PROBES_DIR.glob("*.py"))
        for _ in range(2):
            out = run_probe(t, "health", {}, timeout_s=60)
            assert out.ok, out.reason
        assert t.probe_command("health") == first
        assert t._client is client, "the connection must be reused"
    finally:
        t.close()
    assert not staged.exists()


def test_fanout_runs_nodes_at_once_within_its_bound(make_hosts, tmp_path):
    hosts = make_hosts(4)
    log = tmp_path / "spans"
    log.mkdir()
    # The spans are the wrapper's; the probe after them replays its recorded document
    # (tests/support/replay.py): what is measured is the fan-out, not health's imports.
    wrapper = script(tmp_path / "timed.sh",
                     f"s=$(date +%s.%N); sleep 1.5; "
                     f"echo \"$s $(date +%s.%N)\" > {log}/$(hostname); "
                     f"exec {replay_python(tmp_path / 'replay')} \"$@\"\n")
    inv = load_inventory(hosts.write_inventory(tmp_path / "inv.yaml", python=wrapper))

    def overlap(fanout: int) -> int:
        for f in log.iterdir():
            f.unlink()
        run = Run(inv, list(inv.nodes), "quick", tmp_path / "reports", f"f{fanout}",
                  fanout=fanout)
        try:
            assert all(o.ok for o in run.execute("health").values())
        finally:
            run.close()
        spans = [tuple(map(float, f.read_text().split())) for f in log.iterdir()]
        # The most spans that hold one instant: how many probes ran at once.
        return max(sum(s <= t < e for s, e in spans) for t, _ in spans)

    assert overlap(4) == 4
    assert overlap(2) == 2


def test_inventory_values_are_never_pasted_into_a_shell(make_hosts, tmp_path):
    hosts = make_hosts(1)
    marker = tmp_path / "pwned"
    python = f"{sys.executable}; touch {marker}"
    workdir = f"{tmp_path}/w$(touch {marker}-w)"
    inv = hosts.write_inventory(tmp_path / "inv.yaml", python=python, workdir=workdir)
    node = load_inventory(inv).nodes[0]
    t = SshTransport(node, PROBES_DIR)
    try:
        out = run_probe(t, "health", {}, timeout_s=30)
    finally:
        t.close()
    assert not marker.exists() and not Path(f"{marker}-w").exists()
    # The interpreter was taken as one word, a path that does not exist ...
    assert not out.ok and "could not start: interpreter or probe not found" in out.reason
    assert f"{sys.executable}; touch {marker}: No such file" in out.reason, out.reason
    # ... and the workdir as one name, made as it is written.
    assert Path(workdir).is_dir()


def test_ssh_agent_is_used_when_no_identity_file_is_given(make_hosts, tmp_path,
                                                          monkeypatch):
    hosts = make_hosts(1)
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        # The probe replays its recorded document (tests/support/replay.py): what is
        # tested is the login through the agent, not health's imports.
        inv = hosts.write_inventory(tmp_path / "inv.yaml",
                                    python=replay_python(tmp_path / "replay"))
        doc = yaml.safe_load(inv.read_text())
        del doc["defaults"]["ssh"]["identity_file"]
        inv.write_text(yaml.safe_dump(doc))
        node = load_inventory(inv).nodes[0]

        def attempt() -> str:
            t = SshTransport(node, PROBES_DIR)
            try:
                out = run_probe(t, "health", {}, timeout_s=60)
            finally:
                t.close()
            return "ok" if out.ok else out.reason

        assert f"SSH agent at {sock} holds no key" in attempt()
        subprocess.run(["ssh-add", "-q", str(hosts.client_key)], check=True,
                       env={**os.environ, "SSH_AUTH_SOCK": str(sock)})
        assert attempt() == "ok"
    finally:
        agent.kill()
        agent.wait()


def test_a_runs_first_probes_start_only_once_every_node_is_staged(make_hosts, tmp_path):
    """The start skew: no probe starts while another node is still being staged, so the
    first check's probes run together (the burn and the all-reduce need their nodes at
    once). h2's link is slowed until the probes take seconds to reach it; each probe, as
    it starts, counts the nodes whose staged directory holds the probes."""
    hosts = make_hosts(2)
    hosts.rate_limit(hosts[1], "100kbit", burst="4kb")  # the 56 kB of probes: 4 s
    remote = Path(hosts.inventory()["defaults"]["workdir"])
    log = tmp_path / "staged"
    log.mkdir()
    py = script(tmp_path / "py", f"ls {remote}/burnin-*/health.py | wc -l > {log}/$(hostname)\n"
                f'exec {replay_python(tmp_path / "replay")} "$@"\n')
    inv = load_inventory(hosts.write_inventory(tmp_path / "inv.yaml", python=py))
    run = Run(inv, list(inv.nodes), "quick", tmp_path / "reports", "r1")
    try:
        assert all(o.ok for o in run.execute("health").values())
    finally:
        run.close()
    assert {f.name: int(f.read_text()) for f in log.iterdir()} == {"h1": 2, "h2": 2}


def test_probes_get_their_settings_once_every_node_has_started_and_a_dead_one_leaves(
        make_hosts, tmp_path):
    """The start gate (burnin/transports/fanout.py): every probe's command is started, then
    the settings, which a probe waits for before it measures anything, go out in one loop.
    h2's link dies after the first check: its start gets no answer, and h1's probe, started,
    waits for its settings until h2's start has given up (its connect_timeout_s), not
    longer; h2 fails alone, with its own reason."""
    hosts = make_hosts(2)
    log = tmp_path / "waited"
    log.mkdir()
    py = tmp_path / "py"
    py.write_text("#!/bin/bash\nt0=$EPOCHREALTIME\nIFS= read -r settings\n"
                  f'echo "$t0 $EPOCHREALTIME" > {log}/$(hostname)\n'
                  f'exec {replay_python(tmp_path / "replay")} "$@" '
                  '< <(printf "%s\\n" "$settings"; exec cat)\n')
    py.chmod(0o755)
    timeout = 3
    inv = load_inventory(hosts.write_inventory(tmp_path / "inv.yaml", python=str(py), nodes={
        "h2": {"ssh": {"connect_timeout_s": timeout}}}))
    run = Run(inv, list(inv.nodes), "quick", tmp_path / "reports", "r1")
    try:
        assert all(o.ok for o in run.execute("health").values())  # connected, staged
        for f in log.iterdir():
            f.unlink()
        hosts.link_down(hosts[1])
        t0 = time.monotonic()
        out = run.execute("health")
        took = time.monotonic() - t0
    finally:
        run.close()
    assert out["h1"].ok, out["h1"].reason
    assert not out["h2"].ok and "cannot start a command on" in out["h2"].reason, out["h2"]
    assert [f.name for f in log.iterdir()] == ["h1"]
    started, got = map(float, (log / "h1").read_text().split())
    # Without the gate h1 has its settings a send after its start; with it, once h2's start
    # has failed: its time-out (less h1's own start), and not much past it (a hang bound).
    assert got - started > timeout / 2, got - started
    assert took < 60, took
