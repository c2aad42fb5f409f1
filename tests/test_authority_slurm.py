"""The ledger is the only authority, on a real Slurm: node-check (HealthCheckProgram, a real
slurmd) beside a real run over the same hosts' SSH, one inventory for both, with
`quarantine.actions: [slurm]`. node-check drains h3 for a lost mount; the run quarantines
h3, and its drain takes node-check's place, so that node-check, once the mount is back,
does not resume a node the ledger holds. The end of the run drains h2, held but resumed
by someone; an administrator's drain on held h1 stays. Someone resumes h3: `burnin
quarantine reconcile` (a timer's command) drains it again."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from support.suiterun import junit_cases, run_suite, script
from test_nodecheck_slurm import ROOT, after_checks, mnt, wait_for, wrapper  # noqa: F401

from burnin.ledger.api import Ledger

pytestmark = pytest.mark.slow

ADMIN = "admin: fan replaced"


def test_a_held_node_is_never_in_service_whatever_node_check_finds_or_whoever_resumes_it(
        tmp_path, make_slurm, mnt, pytester):  # noqa: F811
    ledger_path = tmp_path / "q.db"
    ledger = Ledger(ledger_path)  # burnin ledger init
    inv = tmp_path / "inventory.yaml"
    program = tmp_path / "node-check-health"

    def prepare(cluster) -> None:
        """One inventory for the run and node-check; node-check watches h3 alone (its
        storage mount), which keeps two cores free for the run."""
        doc = cluster.hosts.inventory(storage={"path": str(mnt / "data"), "mount": str(mnt)})
        doc["node_check"] = {"budget_s": 30, "state_dir": str(tmp_path / "state" / "{node}")}
        doc["quarantine"] = {"ledger": str(ledger_path), "actions": ["slurm"]}
        # h3's probes end as a node whose GPU fell off the bus: the run quarantines it.
        doc["nodes"][2]["python"] = script(tmp_path / "h3-python",
                                           "echo 'GPU has fallen off the bus' >&2\nexit 3\n")
        inv.write_text(yaml.safe_dump(doc))
        wrapper(program, inv, cluster.conf, "health")
        body = program.read_text().split("\n", 1)
        program.write_text(f'{body[0]}\n[ "$(hostname)" = h3 ] || exit 0\n{body[1]}')

    cluster = make_slurm(3, extra_conf=f"HealthCheckProgram={program}\n"
                                       "HealthCheckInterval=2\nHealthCheckNodeState=ANY\n",
                         before_start=prepare)
    assert [h.name for h in cluster.hosts.hosts] == ["h1", "h2", "h3"]
    # Held before the run: h1 drained by an administrator since, h2 resumed by someone.
    for node in ("h1", "h2"):
        ledger.record_failure(node, cluster.hosts.prefix, ["sdc"],
                              ["sdc: cuda:3: 12 wrong elements"], {}, "run-0")
        ledger.set_drained(node, True)
    cluster.scontrol("update", "nodename=h1", "state=drain", f"reason={ADMIN}")
    assert cluster.state("h2") == ("idle", "")

    done = cluster.in_node("h3", "umount", str(mnt))
    assert done.returncode == 0, done.stderr
    wait_for("h3 drained by node-check",
             lambda: cluster.state("h3")[1].startswith("burnin: node-check: storage"), cluster)

    result, reports = run_suite(pytester, inv, "-k", "health")
    assert junit_cases(reports)["h3"]["health"][0] in ("failure", "error")
    assert ledger.quarantined() == {"h1", "h2", "h3"}
    # The run's drain replaced node-check's reason with its own ...
    state, reason = cluster.state("h3")
    assert state in ("drained", "draining") and reason.startswith("burnin: failed health"), \
        (state, reason)
    # ... and its end drained h2, held but in service, with its ledger reason.
    assert cluster.state("h2") == ("drained", "burnin: failed sdc; cuda:3: 12 wrong elements")
    assert cluster.state("h1") == ("drained", ADMIN)
    assert ledger.history("h2")[-1]["event"] == "reconciled"
    assert ledger.history("h1")[-1]["event"] == "quarantined"
    result.stdout.fnmatch_lines([
        "*slurm on h3: drained: burnin: failed health*(in place of 'burnin: node-check: st*",
        "*reconciled with the ledger: h2 was held but in service*"])
    suite = ET.parse(reports / "latest" / "junit.xml").getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert (props["quarantine_reconciled"], props["quarantine_reconciled_nodes"]) == ("1", "h2")
    assert 'burnin_quarantine_reconciled_nodes{cluster="' in (
        reports / "latest" / "metrics.prom").read_text()
    assert "} 1\n" in (reports / "latest" / "metrics.prom").read_text().split(
        "burnin_quarantine_reconciled_nodes{", 1)[1][:200]

    # The mount is back: node-check's checks pass, but the drain is not its own any more.
    done = cluster.in_node("h3", "mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt))
    assert done.returncode == 0, done.stderr
    after_checks(tmp_path / "state" / "h3", 3, cluster)
    assert cluster.state("h3") == ("drained", reason)

    # Someone resumes h3 all the same: the timer's reconcile drains it again.
    cluster.scontrol("update", "nodename=h3", "state=resume")
    assert cluster.state("h3")[0] == "idle"
    res = subprocess.run([sys.executable, "-m", "burnin", "quarantine", "reconcile",
                          "--inventory", str(inv)], capture_output=True, text=True,
                         cwd=ROOT, env=cluster.env(), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "reconciled with the ledger: h3 was held but in service" in res.stdout, res.stdout
    assert "h1: held, drained by someone else (admin: fan replaced)" in res.stdout
    state, again = cluster.state("h3")
    assert state in ("drained", "draining") and again.startswith("burnin: failed health"), \
        (state, again)
    assert ledger.history("h3")[-1]["event"] == "reconciled"
    assert cluster.state("h1") == ("drained", ADMIN)
    assert Path(reports / "latest").exists()
