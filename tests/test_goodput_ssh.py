"""Goodput on real SSH test hosts: three hosts, each writing and reading its own
loop disk through a blkio throttle; h3's throttle is 10% tighter. Every run, the healthy
hosts pass, h3 is named with its relative speed and its price for a job of the fleet's
size, and `burnin rejudge` reproduces the run's verdicts; the ledger keeps every run.

BURNIN_REPEAT_RUNS sets the number of runs (2 here: a second run is what shows the
verdicts and prices repeat, and the ledger keep each run; 20 for the figure in
docs/developer/testing.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from contextlib import ExitStack

from support import testdisks
from support.requires import need
from support.suiterun import junit_cases, run_suite

from burnin.ledger.api import Ledger

RUNS = int(os.environ.get("BURNIN_REPEAT_RUNS", "2"))
RATE = 40 * 1000 * 1000  # bytes/s: far under the loop disk's own speed, so the cap rules
SLOW = 0.9


def properties(run_dir) -> dict[str, dict[str, str]]:
    return {s.get("name"): {p.get("name"): p.get("value") for p in s.iter("property")}
            for s in ET.parse(run_dir / "junit.xml").getroot().iter("testsuite")}


def test_a_disk_ten_percent_slow_is_priced_every_run_and_healthy_hosts_always_pass(
        pytester, make_hosts, tmp_path):
    need(testdisks.missing_requirements())
    with ExitStack() as stack:
        # Mount first, then start the hosts: a host keeps the mount table it started with.
        disks = [stack.enter_context(testdisks.LoopDisk(tmp_path, f"d{i}", 256))
                 for i in range(3)]
        throttles = [stack.enter_context(testdisks.Throttle(
            d.major_minor, int(RATE * (SLOW if i == 2 else 1.0)))) for i, d in enumerate(disks)]
        hosts = make_hosts(3)
        for h, throttle in zip(hosts.hosts, throttles, strict=True):
            throttle.add(h.sshd.pid)  # the host's sessions, and so its probes
        inv = hosts.write_inventory(
            pytester.path / "inv.yaml",
            nodes={f"h{i + 1}": {"storage": {"path": str(d.mountpoint)}}
                   for i, d in enumerate(disks)},
            checks={"storage": {"size_gb": 0.08, "streams": 1, "min_read_gbps_per_gpu": 0.005,
                                "min_write_gbps_per_gpu": 0.005}})
        # three hosts: fewer than the five voters a relative speed needs by default
        inv.write_text(inv.read_text() + "goodput: {min_voters: 3}\n")
        speeds = []
        for _ in range(RUNS):
            result, reports = run_suite(pytester, inv, "-k", "storage")
            cases = junit_cases(reports)
            assert {n: c["storage"] for n, c in cases.items()} == {
                n: ("passed", "") for n in ("h1", "h2", "h3")}, cases
            run_dir = (reports / "latest").resolve()
            props = properties(run_dir)
            speeds.append({n: float(props[n]["relative_speed"]) for n in ("h1", "h2", "h3")})
            assert min(speeds[-1], key=speeds[-1].get) == "h3", speeds[-1]
            s = speeds[-1]["h3"]
            assert 0.85 <= s <= 0.95, f"the throttle's 10% is not what was measured: {s}"
            assert props["h3"]["speed_set_by"].startswith("storage: storage "), props["h3"]
            assert props["h3"]["goodput_job_nodes"] == "3"  # the fleet's size
            cost = float(props["h3"]["goodput_cost_node_hours_per_hour"])
            assert abs(cost - 3 * (1 - s)) < 1e-3  # N x (1 - s), each printed to 4 places
            assert props["h3"]["goodput_pays_for_itself"] == "true"  # 0.9 > 1 - 1/3
            page = (run_dir / "summary.html").read_text()
            assert "pace of a 3-node job" in page
            again = subprocess.run([sys.executable, "-m", "burnin", "rejudge",
                                    str(run_dir), "--json"], capture_output=True, text=True,
                                   timeout=300)
            assert again.returncode == 0, again.stdout + again.stderr
            out = json.loads(again.stdout)
            assert out["changed"] == [] and out["judged"] == 3
        hosts.teardown()  # before the throttles go: their cgroups must be empty
    for n in ("h1", "h2", "h3"):  # the figures docs/developer/testing.md quotes (pytest -s)
        got = sorted(x[n] for x in speeds)
        print(f"{n}: relative speed over {RUNS} runs {got[0]:.4f} to {got[-1]:.4f}")
    ledger = Ledger(reports / "quarantine.db")
    for n in ("h1", "h2", "h3"):
        kept = ledger.runs(n)
        assert [r.outcome for r in kept] == ["passed"] * RUNS
        assert all(abs(r.speed - x[n]) < 1e-4 for r, x in zip(kept, speeds, strict=True))
