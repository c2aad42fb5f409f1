"""A node slower than its peers is priced for a synchronous job, end to end: junit.xml's
properties, metrics.prom, summary.html's verdict table, `burnin admit --min-speed` and
`burnin rejudge`. The nodes replay the real probes' recorded documents (tests/support/replay.py);
n3's burn document is slowed to 0.92 of its peers' below the controller."""

from __future__ import annotations

import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from support.replay import replay_python
from support.suiterun import run_suite, script, trio_inventory

from burnin.ledger.api import Ledger, NodeRun

SLOW = 0.92
DAY = 86400.0
FILTER = """import json, sys
doc = json.loads(sys.stdin.read())
if doc.get("probe") == "burn":
    for d in doc["devices"]:
        d["tflops"] *= {slow}
print(json.dumps(doc))
"""


def burnin(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burnin", *args], capture_output=True,
                          text=True, timeout=300)


def test_a_slower_node_is_priced_for_a_job_and_min_speed_keeps_it_out(pytester):
    replay = replay_python(pytester.path / "replay")
    filt = pytester.path / "slow.py"
    filt.write_text(FILTER.format(slow=SLOW))
    script(pytester.path / "py3", f"{replay} \"$@\" | {sys.executable} {filt}\n")
    # Three nodes: a relative speed needs five voters unless the inventory says fewer.
    inv = trio_inventory(pytester, pytester.path / "inv.yaml",
                         "goodput: {job_nodes: 64, min_voters: 3}\n")
    # n3's four earlier runs, a week apart, 1% slower each: with this run's 0.92, a
    # steady fall of over 1% a week, warned of; it is under the break-even of a 64-node
    # job (0.984) already, and the warning says so.
    now = time.time()
    Ledger(pytester.path / "ledger.db").record_runs("inv", [
        NodeRun("n3", f"r{w}", now - (5 - w) * 7 * DAY, "passed", speed=1.0 - 0.01 * w)
        for w in range(4)], keep_days=180)
    result, reports = run_suite(pytester, inv, "-k", "health or burn")
    result.assert_outcomes(passed=6)  # 0.92 is no straggler under peer_fraction 0.9
    run_dir = (reports / "latest").resolve()
    props = {s.get("name"): {p.get("name"): p.get("value") for p in s.iter("property")}
             for s in ET.parse(run_dir / "junit.xml").getroot().iter("testsuite")}
    assert props["n1"]["relative_speed"] == "1.0000"
    assert float(props["n3"]["relative_speed"]) == SLOW
    assert props["n3"]["speed_set_by"].startswith("burn: burn TFLOPS cpu")
    assert props["n3"]["goodput_job_nodes"] == "64"
    assert float(props["n3"]["goodput_cost_node_hours_per_hour"]) == round(64 * (1 - SLOW), 4)
    assert props["n3"]["goodput_pays_for_itself"] == "false"  # 0.92 < 1 - 1/64
    assert props["n3"]["speed_warning"].startswith("relative speed falling ")
    assert props["n3"]["speed_warning"].endswith("; below 0.984, the break-even of a 64-node job")
    assert float(props["n3"]["speed_trend_per_week"]) < -0.01
    assert "speed_warning" not in props["n1"]  # one run: no trend
    kept = Ledger(pytester.path / "ledger.db").runs("n3")
    assert [r.run_id for r in kept][:4] == ["r0", "r1", "r2", "r3"] and len(kept) == 5
    assert kept[-1].speed == SLOW and kept[-1].figures["set_by"].startswith("burn: ")

    prom = (run_dir / "metrics.prom").read_text()
    assert f'burnin_node_relative_speed{{cluster="inv",node="n3",check="burn"}} {SLOW:g}' \
        in prom, [ln for ln in prom.splitlines() if "relative_speed" in ln]
    page = (run_dir / "summary.html").read_text()
    # beside the speed, the price junit.xml states: 64 x (1 - 0.92) node-hours a job-hour
    assert f"<td class=r title='set by burn'>{SLOW:.3f}</td><td class=r>5.120</td>" in page
    assert "price (node-h per job-h)</th>" in page
    assert "Speed falling run after run (1 node(s)):" in page
    assert "pace of a 64-node job 0.920" in page

    slow = burnin("admit", str(run_dir / "junit.xml"), "--require", "health,burn",
                  "--min-speed", "0.95")
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert "admitted (2): n1, n2" in slow.stdout
    assert f"n3: relative speed {SLOW:.3f}, below --min-speed 0.95" in slow.stdout
    off = burnin("admit", str(run_dir / "junit.xml"), "--require", "health,burn")
    assert off.returncode == 0, off.stdout
    bad = burnin("admit", str(run_dir / "junit.xml"), "--min-speed", "1.5")
    assert bad.returncode == 2 and "a relative speed above 0, at most 1" in bad.stderr

    again = burnin("rejudge", str(run_dir))
    assert again.returncode == 0, again.stdout + again.stderr
