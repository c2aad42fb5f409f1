"""All-reduce on real SSH test hosts: gloo across namespaces, a rate-limited link named
through pair figures, a host that never joins named within the rendezvous timeout."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from suiterun import junit_cases, run_suite

SETTINGS = {"max_bytes": 4 << 20, "seconds_per_size": 0.1, "rendezvous_timeout_s": 10,
            # The hosts share this machine's cores: their intra-node speeds are not
            # independent, so no relative floor inside a node here.
            "peer_fraction": 0}


def internode_records(reports) -> dict[str, dict]:
    out = {}
    for line in (reports / "latest" / "results.jsonl").open():
        r = json.loads(line)
        if r["check"] == "allreduce_internode":
            out[r["node"]] = r
    return out


def test_the_rate_limited_host_and_only_it_is_named(pytester, make_hosts, finding):
    hosts = make_hosts(4)
    hosts.rate_limit(hosts[2])  # h3: 100 Mbit/s into it, for real
    inv = hosts.write_inventory(pytester.path / "inv.yaml", checks={"allreduce": SETTINGS})
    result, reports = run_suite(pytester, inv, "-k", "allreduce")
    cases = junit_cases(reports)
    for name in ("h1", "h2", "h4"):
        assert cases[name] == {"allreduce": ("passed", ""),
                               "allreduce_internode": ("passed", "")}, cases[name]
    outcome, message = cases["h3"]["allreduce_internode"]
    assert outcome == "failure" and "localised as the slow node" in message
    assert "paired with known-good" in message
    records = internode_records(reports)
    pairs = {tuple(p["nodes"]): p["busbw_gbps"] for r in records.values()
             for p in r["data"]["figures"]["pairs"]}
    slow = [v for k, v in pairs.items() if "h3" in k]
    fast = [v for k, v in pairs.items() if "h3" not in k]
    assert max(slow) < 0.2 * min(fast)
    finding(f"allreduce: pair busbw GB/s with h3 rate-limited: {sorted(pairs.items())}")
    result.assert_outcomes(passed=7, failed=1)


@pytest.mark.skipif(not shutil.which("nft") and not os.environ.get("CI"),
                    reason="needs nftables (CI installs it)")
def test_a_host_that_never_joins_is_named_and_the_rest_go_on(pytester, make_hosts):
    hosts = make_hosts(3)
    hosts.block_outbound(hosts[2])  # h3 cannot reach the rendezvous master
    inv = hosts.write_inventory(pytester.path / "inv.yaml", checks={"allreduce": SETTINGS})
    result, reports = run_suite(pytester, inv, "-k", "allreduce_internode")
    cases = junit_cases(reports)
    outcome, message = cases["h3"]["allreduce_internode"]
    assert outcome == "failure"
    assert "did not join the inter-node all-reduce" in message and "hello" in message
    assert cases["h1"]["allreduce_internode"] == ("passed", "")
    assert cases["h2"]["allreduce_internode"] == ("passed", "")
