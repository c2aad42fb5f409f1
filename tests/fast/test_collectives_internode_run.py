"""The collectives across nodes (collectives_internode.internode) over a network faked at
the probe's edge: each node's probe answers as the real one does in a group (its layout,
and every operation's sweep at its group's slowest member's speed for that operation).
Who is blamed for what, which operations are sought and how many launches the searches
share, in milliseconds; the real groups on gloo are in tests/test_collectives_internode.py."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

from support.judging import judge

from burnin.checks import CHECKS
from burnin.checks.collectives import OPS
from burnin.checks.collectives_internode import excluded, internode
from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.probe.protocol import ProbeOutcome

NAME = "collectives_internode"


class Net:
    """speeds: {node: {op: GB/s}} (a group runs each operation at its slowest member's);
    stuck: nodes that join but cannot complete a group; every member reports its group's
    sweeps, which the rendezvous master (the one told who is in it) fills."""

    def __init__(self, speeds: dict[str, dict[str, float]], stuck=()):
        self.speeds, self.stuck = speeds, set(stuck)
        self.ops: dict[int, dict] = {}
        self.groups: list[tuple[str, ...]] = []
        self.lock = threading.Lock()

    def probe(self, node, check, payload, timeout_s, *args, **kwargs) -> ProbeOutcome:
        assert check.name == "collectives"  # the collectives probe, in a group
        g = payload["group"]
        figures = {"world": g["world"], "first_rank": g["rank_offset"],
                   "ranks_here": g["ranks_here"], "mode": "inter-node"}
        errors = []
        with self.lock:
            ops = self.ops.setdefault(g["master_port"], {})
        if names := g.get("nodes"):
            with self.lock:
                self.groups.append(tuple(names))
            if self.stuck & set(names):
                errors.append("rank 0 failed: RuntimeError: timed out waiting for the group")
            for op in OPS:
                ops[op] = [{"bytes": 1 << 20, "busbw_gbps": min(self.speeds[n][op]
                                                                for n in names),
                            "wrong_elements": 0}]
        if not errors:
            figures["ops"] = ops
        return ProbeOutcome(node.name, "collectives", True, data={
            "probe": "collectives", "schema": 1, "node": {}, "errors": errors,
            "devices": [{"rank": g["rank_offset"], "host": node.name, "device": "cpu",
                         "wrong_elements": 0}], "figures": figures})


def fleet(n: int, base: float = 10.0, **slow: dict[str, float]) -> dict[str, dict[str, float]]:
    return {f"n{i}": {**dict.fromkeys(OPS, base), **slow.get(f"n{i}", {})}
            for i in range(1, n + 1)}


def run_over(tmp_path, net: Net, nodes: int, inter: dict | None = None,
             fabric: dict | None = None):
    """{node: (failures, excluded)} of the check over `nodes` nodes."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"version": 1, "checks": {NAME: inter or {}},
                               "defaults": {"transport": "local", "gpus": 0},
                               "nodes": [{"name": f"n[1-{nodes}]"}]}))
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "t")
    group = replace(run.group_run(CHECKS[NAME]), probe=net.probe,
                    launcher=lambda node: None, failed=dict, devices=lambda node: 1,
                    gpus=lambda node: 0,
                    fleet_of=lambda check: fabric if check == "fabric" else None)
    out = internode(group)
    assert set(out) == {n.name for n in run.nodes}
    return {name: (judge(NAME, o)[0], excluded(o)) for name, o in out.items()}, out


def test_a_node_slow_in_one_operation_is_named_for_it_and_the_searches_share_launches(
        tmp_path):
    net = Net(fleet(6, n4={"reduce_scatter": 0.5}))
    verdicts, out = run_over(tmp_path, net, 6)
    for name in ("n1", "n2", "n3", "n5", "n6"):
        assert verdicts[name] == ((), ""), verdicts[name]
    (failure,) = verdicts["n4"][0]
    assert failure.startswith("localised as the slow node: reduce-scatter: 0.500 GB/s with "
                              "known-good "), failure
    assert "the group of 6 nodes" in failure
    # The group, the first round, then reduce-scatter's own splits and confirmations; the
    # other three operations' searches read the first round's launches only.
    sought = {p["op"] for p in out["n1"].data["figures"]["pairs"]}
    assert sought == set(OPS)
    splits = [p for r in out.values() for p in r.data["figures"]["pairs"]
              if p["kind"] in ("split", "confirm")]
    assert splits and {p["op"] for p in splits} == {"reduce_scatter"}
    first = net.groups[1:4]  # three groups of two (about the square root of 6 each)
    assert len(set(first)) == 3 and all(net.groups.count(g) == 1 for g in first), net.groups


def test_a_floor_from_the_fabric_seeks_all_gather_and_reduce_scatter_alone(tmp_path):
    # 2 HCAs x 100 Gb/s: half of 25 GB/s of line rate, for the ring collectives only.
    fabric = {"hcas": (2, "", 4), "rate": {"x": (100.0, "", 4)}}
    net = Net(fleet(4, 20.0, n2={"all_gather": 5.0}))
    verdicts, out = run_over(tmp_path, net, 4, inter={"pair_fraction": 0}, fabric=fabric)
    (failure,) = verdicts["n2"][0]
    assert failure.startswith("localised as the slow node: all-gather: 5.000 GB/s with "
                              "known-good "), failure
    assert "the floor of 12.5 GB/s" in failure
    assert all(verdicts[n] == ((), "") for n in ("n1", "n3", "n4")), verdicts
    figures = out["n1"].data["figures"]
    assert figures["floors"] == {"all_gather": 12.5, "reduce_scatter": 12.5}
    # pair_fraction 0: nothing sought by peers, only the operation below its floor
    assert {p["op"] for p in figures["pairs"]} == {"all_gather"}


def test_a_group_below_an_inventory_floor_with_nobody_to_blame_fails_every_member(tmp_path):
    net = Net(fleet(3))
    verdicts, _ = run_over(tmp_path, net, 3, inter={"min_all_to_all_gbps": 50})
    for name in ("n1", "n2", "n3"):
        (failure,) = verdicts[name][0]
        assert failure == ("inter-node all-to-all busbw 10.000 GB/s below the floor of "
                           "50 GB/s (set in the inventory), and no single node was localised")


def test_a_node_that_cannot_complete_the_collectives_is_named_and_the_rest_pass(tmp_path):
    net = Net(fleet(3), stuck=("n3",))
    verdicts, _ = run_over(tmp_path, net, 3)
    (failure,) = verdicts["n3"][0]
    assert failure.startswith("did not take part in the inter-node collectives: could not "
                              "complete the collectives with known-good "), failure
    assert verdicts["n1"] == verdicts["n2"] == ((), "")
