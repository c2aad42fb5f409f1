"""`burnin run --rolling` on a real Slurm test cluster: with a job running on every node,
waves of `max_out: 1` validate each node once, never kill a job, never have more than one
node out of service, and a loop killed half-way is resumed by the next one (the node it
had drained is taken up, the node it had validated is not re-validated). A node that fails
is left to quarantine: the run's drain takes the place of the rolling one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.suiterun import NO_HYPOTHESIS, REPO
from test_interrupt import wait_for
from test_slurm import slurm_inventory

from burnin.ledger.api import Ledger
from burnin.ledger.rolling import OUT, VALIDATED
from burnin.model.rolling import ROLLING_REASON

# Real SSH hosts or a real Slurm cluster, or a benchmark: minutes, not seconds. CI runs
# them all; `-m "not slow"` leaves them out of a developer's quick run.
pytestmark = pytest.mark.slow

OUT_FLAGS = ("DRAIN", "MAINT", "RESERVED")


def job(cluster, node: str, script: str) -> str:
    """An exclusive batch job on `node`; its id."""
    res = subprocess.run(["sbatch", "--parsable", "--exclusive", f"--nodelist={node}",
                          "--nodes=1", "--output=/dev/null", f"--job-name=user-{node}",
                          "--wrap", script], capture_output=True, text=True,
                         env=cluster.env(), timeout=60, check=True)
    return res.stdout.strip().split(";")[0]


def nodes_out(cluster) -> set[str]:
    """Nodes out of service as scontrol shows them: drained, draining or in a reservation."""
    res = subprocess.run(["scontrol", "show", "node", "--oneliner"], capture_output=True,
                         text=True, env=cluster.env(), timeout=30)
    out = set()
    for line in res.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if set(fields.get("State", "").split("+")) & set(OUT_FLAGS):
            out.add(fields["NodeName"])
    return out


class Sampler(threading.Thread):
    """scontrol, twice a second, for the whole test: the most nodes out at once."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.cluster, self.most, self.seen, self.stop = cluster, 0, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            out = nodes_out(self.cluster)
            self.seen.append(out)
            self.most = max(self.most, len(out))
            time.sleep(0.5)


def rolling(inv: Path, reports: Path, cluster) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "burnin", "run", "--rolling", "--inventory",
                             str(inv), "--reports", str(reports), "-k", "health",
                             "-p", "no:cacheprovider", "-q"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**cluster.env(), **NO_HYPOTHESIS})


def test_rolling_waves_validate_every_node_kill_no_job_and_resume_after_a_kill(make_slurm,
                                                                             tmp_path):
    cluster = make_slurm(3)
    ledger_path = tmp_path / "ledger.db"
    Ledger(ledger_path)
    # h3 fails health: the inventory wants more CPUs than it has
    inv = slurm_inventory(cluster, tmp_path / "inv.yaml",
                          nodes={"h3": {"checks": {"health": {"cpus": 4096}}}},
                          quarantine={"ledger": str(ledger_path), "actions": ["slurm"]},
                          rolling={"max_out": 1, "drain_timeout_s": 120, "poll_s": 0.3,
                                   "every": "7d"})
    ends = tmp_path / "ends"
    ends.mkdir()
    go = tmp_path / "go-h2"
    # Every node busy; h2's job runs until the test says, so the first loop is killed
    # while it waits for h2 (its second wave), h1 already validated.
    jobs = {"h1": job(cluster, "h1", f"sleep 2; touch {ends}/h1"),
            "h2": job(cluster, "h2", f"while [ ! -e {go} ]; do sleep 0.2; done; "
                                     f"touch {ends}/h2"),
            "h3": job(cluster, "h3", f"sleep 2; touch {ends}/h3")}
    wait_for(lambda: all(cluster.state(n)[0] == "allocated" for n in jobs), 60,
             "a job running on every node")
    sampler = Sampler(cluster)
    sampler.start()
    reports = tmp_path / "reports"
    ledger = Ledger(ledger_path)
    first = rolling(inv, reports, cluster)
    try:
        wait_for(lambda: ledger.rolling_last().get("h2") == OUT
                 and "h1" in ledger.rolling_validated(), 300,
                 "h1 validated and h2 drained for the second wave")
    except AssertionError:
        os.killpg(first.pid, signal.SIGKILL)
        raise AssertionError(first.communicate()[0].decode(errors="replace")[-3000:]) from None
    os.killpg(first.pid, signal.SIGKILL)  # a crash: nothing given back
    first.communicate()
    assert cluster.state("h2") == ("draining", ROLLING_REASON), cluster.state("h2")
    validated_h1 = ledger.rolling_validated()["h1"]
    second = rolling(inv, reports, cluster)
    time.sleep(2)
    assert "h3" not in nodes_out(cluster), "the killed loop's h2 fills the one place"
    go.touch()
    out, _ = second.communicate(timeout=400)
    text = out.decode(errors="replace")
    sampler.stop.set()
    sampler.join()
    assert second.returncode == 1, text[-3000:]
    assert set(ledger.rolling_validated()) == {"h1", "h2"}, text[-3000:]
    assert ledger.quarantined() == {"h3"}
    state, reason = cluster.state("h3")
    assert state == "drained" and reason.startswith("burnin: failed health"), (state, reason)
    assert ledger.rolling_validated()["h1"] == validated_h1, "h1 was validated again"
    assert sorted(p.name for p in ends.iterdir()) == ["h1", "h2", "h3"], "a job was killed"
    assert sampler.most == 1, f"more than one node out at once: {sampler.seen}"
    assert nodes_out(cluster) == {"h3"}, "a node left out of service"
    assert "ETA" in text and (reports / "rolling.prom").read_text().count(
        'burnin_rolling_nodes{state="left"} 0') == 1
    # A third run: every node validated within `every` or held, nothing is due.
    third = rolling(inv, reports, cluster)
    assert third.wait(timeout=120) == 0
    assert sum(1 for e in ledger.history("h2") if e["event"] == VALIDATED) == 1
