"""The inter-node all-reduce: its groups run under its own timeout_s, the one an inventory
sets under `checks: allreduce_internode:` (it was validated, then ignored for the intra-node
check's); its judge and figures on the records the controller writes for each node."""

from __future__ import annotations

import json
from dataclasses import replace

from support.judging import judge

from burnin.checks import CHECKS
from burnin.checks.allreduce_internode import excluded, internode
from burnin.checks.allreduce_internode import figures as internode_figures
from burnin.checks.base import Figure
from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.probe.protocol import ProbeOutcome


def timeouts_of_a_run(tmp_path, checks: dict) -> set[float]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"version": 1, "checks": checks,
                               "defaults": {"transport": "local", "gpus": 0},
                               "nodes": [{"name": "n[1-3]"}]}))
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "t")
    seen = []

    def probe(node, check, payload, timeout_s, *args, **kwargs):
        seen.append(timeout_s)
        return ProbeOutcome(node.name, "allreduce", False, reason="no rendezvous here")

    internode(replace(run.group_run(CHECKS["allreduce_internode"]), probe=probe,
                      launcher=lambda node: None, failed=dict, devices=lambda node: 2,
                      gpus=lambda node: 0))
    assert seen, "no group was started"
    return set(seen)


def test_the_inter_node_groups_run_under_their_own_timeout(tmp_path):
    checks = {"allreduce": {"timeout_s": 99}, "allreduce_internode": {"timeout_s": 7}}
    assert timeouts_of_a_run(tmp_path, checks) == {7.0}


def test_by_default_the_inter_node_timeout_is_the_profiles(tmp_path):
    # The quick profile's 300 s, whatever the intra-node check is given.
    assert timeouts_of_a_run(tmp_path, {"allreduce": {"timeout_s": 99}}) == {300.0}


# --- the inter-node judge (burnin/checks/allreduce_internode.py), on the records the
# controller writes for each node -------------------------------------------------------

GROUP = {"members": 3, "rank0": "n1", "busbw_gbps": 12.5, "bytes": 4 << 20, "sweep": []}
PAIRS = [{"nodes": ["n1", "n3"], "busbw_gbps": 0.25, "retest": False, "completed": True},
         {"nodes": ["n3", "n2"], "busbw_gbps": 1.5, "retest": True, "completed": True}]


def internode_outcome(errors=(), **figures) -> ProbeOutcome:
    return ProbeOutcome("n3", "allreduce_internode", True, data={
        "probe": "allreduce", "schema": 1, "node": {}, "devices": [], "errors": list(errors),
        "figures": figures})


def test_a_member_of_a_good_group_passes():
    assert judge("allreduce_internode", internode_outcome(group=GROUP, pairs=[],
                                                          wrong_elements=0)) == ((), ())


def test_a_node_that_did_not_run_fails_with_the_reason():
    out = ProbeOutcome("n3", "allreduce_internode", False, "ssh: connection refused")
    assert judge("allreduce_internode", out) == (("ssh: connection refused",), ())


def test_the_localised_slow_node_is_told_its_pairs_and_the_group():
    out = internode_outcome(group=GROUP, pairs=PAIRS, slow_with_good_partner=True,
                            verdict="0.250 GB/s paired with known-good n1, below 1.000 GB/s")
    assert judge("allreduce_internode", out) == ((
        "localised as the slow node: 0.250 GB/s paired with known-good n1, below 1.000 GB/s; "
        "its pairs (GB/s): n1+n3 0.250, n3+n2 1.500; group busbw 12.500 GB/s at 4 MiB over "
        "3 nodes (judged at 4 MiB, the sweep's best; floor none: the fleet's fast groups are "
        "the yardstick)",), ())


def test_wrong_sums_the_nodes_errors_and_a_group_failure_all_fail_it():
    out = internode_outcome(["rank 2 failed: timeout"], group=GROUP, wrong_elements=3,
                            group_failure="inter-node busbw 1.000 GB/s below the floor",
                            floor_gbps=5.0, floor_source="set in the inventory")
    assert judge("allreduce_internode", out) == ((
        "rank 2 failed: timeout",
        "3 wrong elements in this node's all-reduce results, expected exact sums",
        "inter-node busbw 1.000 GB/s below the floor (judged at 4 MiB, the sweep's best; "
        "floor 5 GB/s, set in the inventory)"), ())


def test_a_group_failure_with_no_group_figure_says_only_that():
    out = internode_outcome(group_failure="did not take part in the inter-node all-reduce: x")
    assert judge("allreduce_internode", out) == ((
        "did not take part in the inter-node all-reduce: x",), ())


def test_why_a_node_was_left_out():
    assert excluded(internode_outcome(excluded="not in the inter-node run: failed sdc")) == \
        "not in the inter-node run: failed sdc"
    assert excluded(internode_outcome(group=GROUP)) == ""
    assert excluded(ProbeOutcome("n3", "allreduce_internode", False, "down")) == ""
    assert excluded(ProbeOutcome("n3", "allreduce_internode", True, data={})) == ""


def test_the_group_figure_is_the_bus_bandwidth_at_the_judged_size():
    record = {"data": {"figures": {"group": GROUP}}}
    (fig,) = internode_figures(record)
    assert fig == Figure("allreduce_busbw_gbps", (("scope", "inter"), ("bytes", "4194304")),
                         12.5, "All-reduce bus bandwidth at the judged size")
    assert internode_figures({"data": {"figures": {"excluded": "x"}}}) == []


def test_a_slow_node_with_no_group_figure_is_told_zeros_not_a_crash():
    out = internode_outcome(pairs=PAIRS[:1], slow_with_good_partner=True, verdict="v")
    assert judge("allreduce_internode", out) == ((
        "localised as the slow node: v; its pairs (GB/s): n1+n3 0.250; group busbw 0.000 "
        "GB/s at 0 MiB over 0 nodes",), ())


def test_a_node_whose_probe_failed_was_not_left_out_whatever_its_data_says():
    out = ProbeOutcome("n3", "allreduce_internode", False, "down",
                       data={"figures": {"excluded": "x"}})
    assert excluded(out) == ""
