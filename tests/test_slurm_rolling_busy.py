"""`burnin run --rolling` and a node whose job does not end, on a real Slurm test cluster:
Ctrl-C gives the wave's node back with its job running, a drain an administrator set
meanwhile stays, and past `drain_timeout_s` the node is given back, its job untouched,
while the other node is tried: it fails, and with no quarantine drain to take the rolling
one's place it stays out under a reason no loop takes up."""

from __future__ import annotations

import signal
import subprocess

import pytest
from test_interrupt import wait_for
from test_slurm import slurm_inventory
from test_slurm_rolling import job, rolling

from burnin.ledger.api import Ledger
from burnin.ledger.rolling import RELEASED
from burnin.model.rolling import FAILED_REASON, ROLLING_REASON

# Real SSH hosts or a real Slurm cluster, or a benchmark: minutes, not seconds. CI runs
# them all; `-m "not slow"` leaves them out of a developer's quick run.
pytestmark = pytest.mark.slow


def responding(cluster, node: str) -> bool:
    """Slurm marks a node just resumed NOT_RESPONDING until its next ping: until then a
    rolling run counts it out of service, as any node Slurm would give no job."""
    res = subprocess.run(["scontrol", "show", "node", node, "--oneliner"],
                         capture_output=True, text=True, env=cluster.env(), timeout=30)
    return res.returncode == 0 and "NOT_RESPONDING" not in res.stdout


def test_a_busy_node_is_given_back_its_job_untouched_and_an_admins_drain_stays(make_slurm,
                                                                              tmp_path):
    cluster = make_slurm(2)
    ledger_path = tmp_path / "ledger.db"
    ledger = Ledger(ledger_path)

    def inventory(timeout_s: float):
        # h2 fails health (it has fewer CPUs than that), and no quarantine action drains
        return slurm_inventory(cluster, tmp_path / "inv.yaml",
                               nodes={"h2": {"checks": {"health": {"cpus": 4096}}}},
                               quarantine={"ledger": str(ledger_path), "actions": []},
                               rolling={"max_out": 1, "drain_timeout_s": timeout_s,
                                        "poll_s": 0.3, "retries": 1})
    go = tmp_path / "go"
    job(cluster, "h1", f"while [ ! -e {go} ]; do sleep 0.2; done; touch {tmp_path}/ended")
    wait_for(lambda: cluster.state("h1")[0] == "allocated", 60, "h1's job running")
    reports = tmp_path / "reports"
    running = [("allocated", ""), ("mixed", "")]

    # Ctrl-C while the wave waits on h1: given back, its job running on.
    proc = rolling(inventory(300), reports, cluster)
    wait_for(lambda: cluster.state("h1") == ("draining", ROLLING_REASON), 60, "h1 drained")
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=60)[0].decode(errors="replace")
    assert proc.returncode == 130, out[-2000:]
    assert cluster.state("h1") in running, cluster.state("h1")
    assert ledger.rolling_last()["h1"] == RELEASED
    wait_for(lambda: responding(cluster, "h1"), 120, "h1 answering slurmctld again")

    # An administrator drains h1 while the wave waits: Ctrl-C leaves that drain alone.
    proc = rolling(inventory(300), reports, cluster)
    wait_for(lambda: cluster.state("h1") == ("draining", ROLLING_REASON), 60, "h1 drained")
    cluster.scontrol("update", "nodename=h1", "state=drain", "reason=admin: fan")
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=60)[0].decode(errors="replace")
    assert proc.returncode == 130, out[-2000:]
    assert cluster.state("h1") == ("draining", "admin: fan")
    cluster.scontrol("update", "nodename=h1", "state=resume")
    wait_for(lambda: responding(cluster, "h1"), 120, "h1 answering slurmctld again")

    # drain_timeout_s passes with h1's job still running: h1 given back, h2 tried.
    proc = rolling(inventory(2), reports, cluster)
    out = proc.communicate(timeout=300)[0].decode(errors="replace")
    assert proc.returncode == 1, out[-3000:]
    assert "h1: back in service: still busy after" in out, out[-3000:]
    assert ledger.rolling_validated() == {} and ledger.quarantined() == {"h2"}, out[-3000:]
    # no quarantine drain took h2 over: it stays out, under a reason no loop takes up
    state, reason = cluster.state("h2")
    assert state == "drained" and reason.startswith(FAILED_REASON), (state, reason)
    assert cluster.state("h1") in running and not (tmp_path / "ended").exists()
    go.touch()
    wait_for(lambda: (tmp_path / "ended").exists(), 30, "h1's job ends on its own")
    wait_for(lambda: subprocess.run(["squeue", "-h"], capture_output=True, text=True,
                                    env=cluster.env()).stdout.strip() == "", 30,
             "h1's job gone from squeue (past COMPLETING)")
