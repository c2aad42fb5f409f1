"""The inter-node all-reduce's run (allreduce_internode.internode and groups.localise) over
a network faked at the probe's edge: each node's probe answers as the real one does for
its group (its layout, and on the rendezvous master the sweep), with a link speed per node
and nodes that cannot complete a group. The real groups over real SSH hosts are in
tests/test_allreduce.py; here, who is blamed for what, in milliseconds."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

from support.judging import judge

from burnin.checks import CHECKS
from burnin.checks.allreduce_internode import excluded, internode
from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.probe.protocol import ProbeOutcome

RANKS = 2  # each node's ranks (a CPU node's gloo ranks)


class Net:
    """speeds: each node's link, GB/s (a group runs at its slowest member's); stuck: nodes
    that join the rendezvous but cannot complete an all-reduce (the group's master says so,
    as rank 0 does); down: nodes whose probe does not run at all; liars: nodes whose
    document reports every group they are in at full speed. Every member reports the
    group's sweep, as the probe's every rank does (the times are reduced over every rank):
    one list per group, which its master, the one told who is in it, fills."""

    def __init__(self, speeds: dict[str, float], stuck=(), down=(), liars=()):
        self.speeds, self.stuck, self.down = speeds, set(stuck), set(down)
        self.liars = set(liars)
        self.sweeps: dict[int, list[dict]] = {}
        self.groups: list[tuple[str, ...]] = []
        self.lock = threading.Lock()

    def probe(self, node, check, payload, timeout_s, *args, **kwargs) -> ProbeOutcome:
        if node.name in self.down:
            return ProbeOutcome(node.name, "allreduce", False, "ssh: connection refused")
        g = payload["group"]
        self.max_bytes = payload["settings"].get("max_bytes")
        figures = {"world": g["world"], "first_rank": g["rank_offset"],
                   "ranks_here": g["ranks_here"], "mode": "inter-node"}
        errors = []
        names = g.get("nodes")
        with self.lock:
            sweep = self.sweeps.setdefault(g["master_port"], [])
        if names:  # the rendezvous master: its group's sweep, or why the group failed
            with self.lock:
                self.groups.append(tuple(names))
            if self.stuck & set(names):
                errors.append("rank 0 failed: RuntimeError: timed out waiting for the group")
            else:
                sweep += curve(min(self.speeds[n] for n in names))
        if node.name in self.liars:
            sweep = curve(max(self.speeds.values()))
        if not errors:
            figures["sweep"] = sweep
        devices = [{"rank": g["rank_offset"] + i, "host": node.name, "device": f"cpu:{i}",
                    "wrong_elements": 0} for i in range(g["ranks_here"])]
        return ProbeOutcome(node.name, "allreduce", True, data={
            "probe": "allreduce", "schema": 1, "node": {}, "devices": devices,
            "figures": figures, "errors": errors})


def curve(busbw: float) -> list[dict]:
    return [{"bytes": 1 << 20, "busbw_gbps": busbw / 2, "algbw_gbps": busbw / 2,
             "time_us": 10.0},
            {"bytes": 4 << 20, "busbw_gbps": busbw, "algbw_gbps": busbw, "time_us": 20.0}]


def run_over(tmp_path, net: Net, nodes: int, failed: dict | None = None,
             settings: dict | None = None, gpus: int = 0, inter: dict | None = None,
             fabric: dict | None = None):
    """{node: (failures, excluded)} of the inter-node check over `nodes` nodes."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"version": 1, "checks": {"allreduce": settings or {},
                                                        "allreduce_internode": inter or {}},
                               "defaults": {"transport": "local", "gpus": 0},
                               "nodes": [{"name": f"n[1-{nodes}]"}]}))
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "t")
    # The run's own GroupRun (its settings and payload builder), its edge faked.
    group = replace(run.group_run(CHECKS["allreduce_internode"]), probe=net.probe,
                    launcher=lambda node: None, failed=lambda: dict(failed or {}),
                    devices=lambda node: RANKS, gpus=lambda node: gpus,
                    fleet_of=lambda check: fabric if check == "fabric" else None)
    out = internode(group)
    assert set(out) == {n.name for n in run.nodes}
    return {name: (judge("allreduce_internode", o)[0], excluded(o)) for name, o in out.items()}


def test_a_healthy_fleet_passes_in_one_group(tmp_path):
    net = Net({"n1": 10, "n2": 10, "n3": 10, "n4": 10})
    verdicts = run_over(tmp_path, net, 4, settings={"pair_fraction": 0})
    assert verdicts == {n: ((), "") for n in ("n1", "n2", "n3", "n4")}
    assert net.groups == [("n1", "n2", "n3", "n4")]


def test_the_slow_node_and_only_it_is_named_through_its_groups(tmp_path):
    net = Net({"n1": 10, "n2": 10, "n3": 0.5, "n4": 10})
    verdicts = run_over(tmp_path, net, 4)
    for name in ("n1", "n2", "n4"):
        assert verdicts[name] == ((), ""), verdicts
    (failure,) = verdicts["n3"][0]
    assert failure.startswith("localised as the slow node: 0.500 GB/s with known-good ")
    # Half (pair_fraction) the 90% quantile of the first round's groups (0.5 and 10), not
    # of their median: slow nodes cannot own it.
    assert "below 4.525 GB/s (0.5 of the fleet's fast groups (90% quantile 9.050 GB/s of " \
        "2 groups))" in failure
    assert "confirmed" in failure
    assert "group busbw 0.500 GB/s at 4 MiB over 4 nodes" in failure
    # The whole group; two groups of two; the slow one split, each half with a known-good
    # partner; n3 confirmed with another; then the partners it was slow with, each with
    # a known-good node of its own.
    assert net.groups[0] == ("n1", "n2", "n3", "n4")
    assert set(net.groups[1:3]) == {("n1", "n3"), ("n2", "n4")}
    assert {g[0] for g in net.groups[3:5]} == {"n1", "n3"}
    split = next(g for g in net.groups[3:5] if g[0] == "n3")
    confirm, *partners = net.groups[5:]
    assert confirm[0] == "n3" and confirm[1] in ("n1", "n2", "n4") and confirm != split
    assert {g[0] for g in partners} == {split[1], confirm[1]} and "n3" not in \
        {x for g in partners for x in g}


def test_a_slow_node_placed_first_cannot_report_its_groups_fast(tmp_path):
    """n1 hosts rank 0 of the first group and reports every group it is in at full
    speed: the group's busbw is the lowest any member reports, and n1 is named."""
    net = Net({"n1": 0.5, "n2": 10, "n3": 10, "n4": 10}, liars=["n1"])
    verdicts = run_over(tmp_path, net, 4)
    for name in ("n2", "n3", "n4"):
        assert verdicts[name] == ((), ""), verdicts
    (failure,) = verdicts["n1"][0]
    assert failure.startswith("localised as the slow node: 0.500 GB/s with known-good ")
    assert "group busbw 0.500 GB/s at 4 MiB over 4 nodes" in failure


def test_a_member_that_reports_no_sweep_leaves_its_group_incomplete(tmp_path):
    net = Net({"n1": 10, "n2": 10, "n3": 10, "n4": 10})
    plain = net.probe

    def probe(node, *args, **kwargs):
        out = plain(node, *args, **kwargs)
        if node.name == "n3":
            out.data["figures"].pop("sweep", None)
        return out
    net.probe = probe  # type: ignore[method-assign]
    verdicts = run_over(tmp_path, net, 4)
    assert [n for n, (failures, _) in verdicts.items() if failures] == ["n3"], verdicts
    assert "could not complete an all-reduce with known-good " in verdicts["n3"][0][0]


def test_three_nodes_are_still_paired(tmp_path):
    net = Net({"n1": 10, "n2": 10, "n3": 0.5})
    verdicts = run_over(tmp_path, net, 3)
    assert verdicts["n1"] == verdicts["n2"] == ((), "")
    (failure,) = verdicts["n3"][0]
    assert failure.startswith("localised as the slow node: 0.500 GB/s paired with known-good ")


def test_with_a_floor_a_group_above_it_is_not_paired(tmp_path):
    net = Net({"n1": 10, "n2": 10, "n3": 6})
    verdicts = run_over(tmp_path, net, 3, settings={"min_internode_busbw_gbps": 5})
    assert verdicts == {n: ((), "") for n in ("n1", "n2", "n3")}
    assert net.groups == [("n1", "n2", "n3")]


def test_a_group_below_its_floor_with_nobody_to_blame_fails_every_member(tmp_path):
    net = Net({"n1": 2, "n2": 2, "n3": 2})
    verdicts = run_over(tmp_path, net, 3, settings={"min_internode_busbw_gbps": 5})
    for name in ("n1", "n2", "n3"):
        # the size its floor was judged at, and the floor, on the verdict
        assert verdicts[name] == (("inter-node busbw 2.000 GB/s below the floor of 5 GB/s, "
                                   "and no single node was localised (judged at 4 MiB, the "
                                   "sweep's best; floor 5 GB/s, set in the inventory)",), ""), \
            verdicts


def test_a_node_that_cannot_complete_is_named_and_the_rest_go_on(tmp_path):
    net = Net({"n1": 10, "n2": 10, "n3": 10}, stuck={"n3"})
    verdicts = run_over(tmp_path, net, 3)
    assert verdicts["n1"] == verdicts["n2"] == ((), "")
    (failure,) = verdicts["n3"][0]
    assert failure.startswith("did not take part in the inter-node all-reduce: could not "
                              "complete an all-reduce with known-good n")
    assert net.groups[-1] == ("n1", "n2"), "the others run again without it"


def test_two_nodes_that_cannot_complete_blame_nobody_on_the_others_word(tmp_path):
    net = Net({"n1": 10, "n2": 10}, stuck={"n2"})
    verdicts = run_over(tmp_path, net, 2)
    for name in ("n1", "n2"):
        (failure,) = verdicts[name][0]
        assert failure.startswith("the inter-node all-reduce did not complete, and no node "
                                  "could be singled out with a known-good partner (n1 said: "
                                  "rank 0 failed"), failure


def test_a_node_whose_probe_did_not_run_is_named_with_its_reason(tmp_path):
    net = Net({"n1": 10, "n2": 10, "n3": 10}, down={"n2"})
    verdicts = run_over(tmp_path, net, 3)
    assert verdicts["n2"] == (("did not take part in the inter-node all-reduce: ssh: "
                               "connection refused",), "")
    assert verdicts["n1"] == verdicts["n3"] == ((), "")
    assert net.groups == [("n1", "n2", "n3"), ("n1", "n3")]


def test_nodes_that_failed_a_single_node_check_are_left_out(tmp_path):
    net = Net({"n1": 10, "n2": 10, "n3": 10})
    verdicts = run_over(tmp_path, net, 3, failed={"n2": ["sdc", "burn"]})
    assert verdicts["n2"] == ((), "not in the inter-node run: failed sdc, burn")
    assert verdicts["n1"] == verdicts["n3"] == ((), "")
    assert net.groups == [("n1", "n3")]


def test_fewer_than_two_nodes_left_is_no_inter_node_run(tmp_path):
    net = Net({"n1": 10, "n2": 10})
    verdicts = run_over(tmp_path, net, 2, failed={"n2": ["health"]})
    assert verdicts["n1"] == ((), "fewer than two nodes passed the single-node checks: no "
                                  "inter-node run")
    assert net.groups == []


def test_a_node_groups_inter_node_floor_judges_the_group_it_leads(tmp_path):
    """The rendezvous master's node group sets the group's floor: before, a node group's
    `checks: allreduce:` never reached the inter-node run."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"version": 1, "defaults": {"transport": "local", "gpus": 0},
                               "nodes": [{"name": "n[1-2]", "checks": {"allreduce": {
                                   "min_internode_busbw_gbps": 5}}}, {"name": "n3"}]}))
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "t")
    net = Net({"n1": 2, "n2": 2, "n3": 2})
    out = internode(replace(run.group_run(CHECKS["allreduce_internode"]), probe=net.probe,
                            launcher=lambda node: None, failed=dict,
                            devices=lambda node: 2, gpus=lambda node: 0))
    for name in ("n1", "n2", "n3"):
        assert out[name].data["figures"]["group_failure"] == (
            "inter-node busbw 2.000 GB/s below the floor of 5 GB/s, and no single node was "
            "localised"), name


def test_the_internode_sweep_has_its_own_size_range(tmp_path):
    # GPUs: up to 8 GiB, where published inter-node figures are taken, whatever the
    # intra-node check's max_bytes; CPUs: the allreduce check's; the inventory's own wins.
    net = Net({"n1": 10, "n2": 10})
    run_over(tmp_path, net, 2, settings={"max_bytes": 1 << 30}, gpus=8)
    assert net.max_bytes == 8 << 30
    run_over(tmp_path, net, 2, settings={"max_bytes": 1 << 20})
    assert net.max_bytes == 1 << 20
    run_over(tmp_path, net, 2, settings={"max_bytes": 1 << 30}, gpus=8,
             inter={"max_bytes": 2 << 30})
    assert net.max_bytes == 2 << 30


def test_with_no_floor_the_nodes_own_links_set_one(tmp_path):
    # The fabric check found 2 HCAs at 8 Gb/s on most of 4 nodes: 2 GB/s of line rate a
    # node, half of it the default floor, stated on the verdict with its source.
    fabric = {"hcas": (2, "", 4), "rate": {"InfiniBand": (8.0, "", 4)}}
    net = Net({"n1": 10, "n2": 10, "n3": 0.5, "n4": 10})
    verdicts = run_over(tmp_path, net, 4, fabric=fabric)
    assert [n for n, (f, _) in verdicts.items() if f] == ["n3"]
    (failure,) = verdicts["n3"][0]
    assert "below 1.000 GB/s (the floor of 1 GB/s)" in failure, failure
    assert "floor 1 GB/s, 0.5 of the nodes' line rate, 2 HCAs x 8 Gb/s = 2 GB/s (fabric " \
        "check)" in failure, failure
    # a fleet above it is not searched at all; a node's lone vote sets no floor
    net = Net({"n1": 10, "n2": 10, "n3": 10, "n4": 10})
    run_over(tmp_path, net, 4, fabric=fabric)
    assert net.groups == [("n1", "n2", "n3", "n4")]
    lone = {"hcas": (2, "", 1), "rate": {"InfiniBand": (8.0, "", 1)}}
    net = Net({"n1": 10, "n2": 10, "n3": 0.5, "n4": 10})
    (failure,) = run_over(tmp_path, net, 4, fabric=lone)["n3"][0]
    assert "fast groups" in failure and "line rate" not in failure
