"""Shared causes and single slow nodes on real SSH test hosts (network namespaces, a real
rate limit on a link: tests/support/testhosts.py), no inter-node floor in the inventory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from support.suiterun import junit_cases, run_suite
from test_allreduce import QUICK as ALLREDUCE_QUICK
from test_allreduce import internode_records

from burnin.ledger.api import Ledger

pytestmark = pytest.mark.slow

# tests/test_allreduce.py's QUICK (it says why those sizes and that pair_fraction), no
# intra-node relative floor.
QUICK = {**ALLREDUCE_QUICK, "rendezvous_timeout_s": 10, "peer_fraction": 0}


def inventory(pytester, hosts, nodes: dict) -> str:
    inv = hosts.write_inventory(pytester.path / "inv.yaml", nodes=nodes,
                                checks={"allreduce": QUICK})
    doc = yaml.safe_load(inv.read_text())
    doc["quarantine"] = {"ledger": str(pytester.path / "ledger.db")}
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    Ledger(pytester.path / "ledger.db")
    return str(inv)


def test_a_rate_limited_switch_is_one_incident_naming_it_and_the_others_pass(pytester,
                                                                            make_hosts):
    hosts = make_hosts(6)
    leaf = {h.name: {"labels": {"switch": "leafA" if i < 3 else "leafB"}}
            for i, h in enumerate(hosts)}
    for h in list(hosts)[3:]:
        hosts.rate_limit(h, rate="40mbit")
    inv = inventory(pytester, hosts, leaf)
    result, reports = run_suite(pytester, inv, "-k", "allreduce_internode")
    cases = junit_cases(reports)
    names = [h.name for h in hosts]
    for name in names[:3]:
        assert cases[name]["allreduce_internode"] == ("passed", ""), cases[name]
    for name in names[3:]:
        outcome, message = cases[name]["allreduce_internode"]
        assert outcome == "failure", (name, outcome, message)
        assert message.startswith("switch=leafB: allreduce_internode failed on all 3 of its "
                                  "nodes, none elsewhere"), message
    assert Ledger(pytester.path / "ledger.db").quarantined() == set()
    (kept,) = Ledger(pytester.path / "ledger.db").incidents()
    assert kept.incident.component == "switch=leafB"
    admitted = subprocess.run([sys.executable, "-m", "burnin", "admit",
                               str(reports / "latest" / "junit.xml"), "--json",
                               "--require", "allreduce_internode"],
                              capture_output=True, text=True, timeout=60)
    assert admitted.returncode == 1
    assert sorted(json.loads(admitted.stdout)["admitted"]) == sorted(names[:3])
    result.stdout.fnmatch_lines(["INCIDENT switch=leafB: allreduce_internode failed on all 3*"])


def test_a_single_slow_node_among_many_and_only_it_is_named_its_own_blame_after_confirmation(
        pytester, make_hosts, finding):
    """A single rate-limited host among six: it alone is named, found by group testing and
    named only after its confirmation round with a known-good partner, its pairs' figures
    a fraction of the healthy ones'; its own blame (quarantined), not a shared cause.
    (tests/test_allreduce.py's rate-limited test, merged here: the same search.)"""
    hosts = make_hosts(6)
    slow = list(hosts)[4]
    hosts.rate_limit(slow, rate="40mbit")  # 40 Mbit/s into it, for real
    inv = inventory(pytester, hosts, {})
    # The inter-node groups alone: the rate limit is on the link, which only they cross.
    result, reports = run_suite(pytester, inv, "-k", "allreduce_internode")
    cases = junit_cases(reports)
    for h in hosts:
        if h is not slow:
            assert cases[h.name]["allreduce_internode"] == ("passed", ""), cases[h.name]
    outcome, message = cases[slow.name]["allreduce_internode"]
    assert outcome == "failure" and message.startswith("localised as the slow node: "), message
    # found by group testing, and named only after its confirmation round
    assert "with known-good" in message and "confirmed" in message, message
    assert "shared cause" not in message
    pairs = {tuple(p["nodes"]): p["busbw_gbps"] for r in internode_records(reports).values()
             for p in r["data"]["figures"]["pairs"]}
    throttled = [v for k, v in pairs.items() if slow.name in k]
    healthy = [v for k, v in pairs.items() if slow.name not in k]
    assert throttled and healthy and max(throttled) < 0.2 * min(healthy), pairs
    finding(f"allreduce: pair busbw GB/s with {slow.name} rate-limited: "
            f"{sorted(pairs.items())}")
    assert Ledger(pytester.path / "ledger.db").quarantined() == {slow.name}
    result.assert_outcomes(passed=5, failed=1)
