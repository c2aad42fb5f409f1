"""Local nodes without an address meet on the loopback: the inventory gives such a node
its name for an address, which need not resolve, and an inter-node group's members were
sent to meet its rank 0 there ("cannot reach the rendezvous master at n1:PORT")."""

from __future__ import annotations

import json
from dataclasses import replace

from support.replay import replay_python

from burnin.checks import CHECKS, Judging
from burnin.checks.allreduce_internode import internode
from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.model.nodes import Node
from burnin.transports import rendezvous_address


def test_five_local_nodes_without_addresses_run_the_inter_node_all_reduce(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({
        "version": 1,
        "defaults": {"transport": "local", "gpus": 0, "workdir": str(tmp_path / "work"),
                     "python": replay_python(tmp_path / "replay")},
        "nodes": [{"name": "n[1-5]"}],
        "checks": {"allreduce": {"rendezvous_timeout_s": 10}}}))
    inventory = load_inventory(inv)
    assert [n.address for n in inventory.nodes] == [f"n{i}" for i in range(1, 6)]
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "t")
    try:
        # The single-node checks passed (replayed: their claim is not this test's).
        group = replace(run.group_run(CHECKS["allreduce_internode"]), failed=dict,
                        devices=lambda node: 1, gpus=lambda node: 0)
        outcomes = internode(group)
    finally:
        run.close()
    for node in inventory.nodes:
        verdict = CHECKS["allreduce_internode"].judge(
            node, outcomes[node.name], Judging(run.settings("allreduce_internode", node)))
        assert verdict.passed, (node.name, verdict.failures)
        assert outcomes[node.name].data["figures"]["group"]["members"] == 5


def test_the_rendezvous_address_is_the_nodes_own_where_one_is_given():
    assert rendezvous_address(Node("n1", "n1", transport="local")) == "127.0.0.1"
    assert rendezvous_address(Node("n1", "127.0.0.7", transport="local")) == "127.0.0.7"
    assert rendezvous_address(Node("n1", "n1", transport="ssh")) == "n1"
    assert rendezvous_address(Node("n1", "10.0.0.1", transport="srun")) == "10.0.0.1"
