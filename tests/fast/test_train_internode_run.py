"""The train job across nodes (train_internode.internode and its judge) over nodes faked at
the probe's edge: each node's probe answers as the real one does for its group (its
layout, its ranks' figures, the fingerprints every rank gathers), with a replica that
leaves the others at a step, a slow device and a node that does not run. The real job
over real processes is in tests/test_train_internode.py; here, who is blamed, in
milliseconds."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

from support.judging import judge

from burnin.checks import CHECKS
from burnin.checks.train_internode import excluded, internode
from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.probe.protocol import ProbeOutcome

RANKS = 2  # each node's ranks, one per CPU device
GOOD = 1_000_000


class Job:
    """odd: {rank: (step, fingerprint)}: the rank's replica leaves the others' from that
    step on (every rank gathers every fingerprint, so every node reports it); slow:
    {node: forward and backward seconds of its devices}; down: nodes whose probe does not
    run at all."""

    def __init__(self, odd=None, slow=None, down=(), steps: int = 6):
        self.odd, self.slow, self.down, self.steps = odd or {}, slow or {}, set(down), steps
        self.groups: list[tuple[str, ...]] = []
        self.lock = threading.Lock()

    def probe(self, node, check, payload, timeout_s, *args, **kwargs) -> ProbeOutcome:
        if node.name in self.down:
            return ProbeOutcome(node.name, "train", False, "ssh: connection refused")
        g = payload["group"]
        if g.get("nodes"):
            with self.lock:
                self.groups.append(tuple(g["nodes"]))
        world = g["world"]
        diverged = []
        for step in range(1, self.steps + 1):
            prints = [self.odd[r][1] if r in self.odd and step >= self.odd[r][0] else GOOD
                      for r in range(world)]
            if len(set(prints)) > 1:
                diverged.append({"step": step, "fingerprints": prints})
        compute = self.slow.get(node.name, 0.01)
        devices = [{"rank": g["rank_offset"] + i, "device": f"cpu:{i}", "step_s": compute + 0.01,
                    "compute_s": compute, "comm_s": 0.005, "tokens_per_s": 100.0,
                    "digest": "bad" if g["rank_offset"] + i in self.odd else "good",
                    "wall_s": 0.2, "tokens": 64} for i in range(g["ranks_here"])]
        figures = {"world": world, "first_rank": g["rank_offset"], "ranks_here": g["ranks_here"],
                   "mode": "inter-node", "tokens_per_s": 640.0, "steps": self.steps,
                   "losses": [4.0, 3.0, 2.0, 1.5, 1.2, 1.0], "diverged": diverged[:8]}
        return ProbeOutcome(node.name, "train", True, data={
            "probe": "train", "schema": 1, "node": {}, "devices": devices,
            "figures": figures, "errors": []})


def run_over(tmp_path, job: Job, nodes: int, failed: dict | None = None):
    """{node: (failures, excluded)} of train_internode over `nodes` nodes."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"version": 1, "defaults": {"transport": "local", "gpus": 0},
                               "nodes": [{"name": f"n[1-{nodes}]"}]}))
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "t")
    group = replace(run.group_run(CHECKS["train_internode"]), probe=job.probe,
                    launcher=lambda node: None, failed=lambda: dict(failed or {}),
                    devices=lambda node: RANKS, gpus=lambda node: 0)
    out = internode(group)
    assert set(out) == {n.name for n in run.nodes}
    return {name: (judge("train_internode", o)[0], excluded(o)) for name, o in out.items()}


def test_a_healthy_fleet_passes_as_one_job(tmp_path):
    job = Job()
    verdicts = run_over(tmp_path, job, 3)
    assert verdicts == {n: ((), "") for n in ("n1", "n2", "n3")}
    assert job.groups == [("n1", "n2", "n3")]


def test_a_rank_whose_replica_leaves_fails_its_node_alone_named_by_node_and_device(tmp_path):
    # rank 3: n2's second device (ranks 2 and 3 are n2's)
    verdicts = run_over(tmp_path, Job(odd={3: (4, 7)}), 3)
    assert verdicts["n1"] == verdicts["n3"] == ((), "")
    (failure,) = verdicts["n2"][0]
    assert failure.startswith("replicas differ after step 4 across nodes: rank 3 on n2 "
                              "(cpu:1) holds parameters other than most ranks "
                              "(fingerprint 7, the others' 1000000)"), failure


def test_final_digests_that_differ_name_the_odd_rank(tmp_path):
    # a replica that differs only at the end (no step saw it): its final digest
    job = Job(odd={4: (99, 7)})
    verdicts = run_over(tmp_path, job, 3)
    assert verdicts["n1"] == verdicts["n2"] == ((), "")
    (failure,) = verdicts["n3"][0]
    assert failure.startswith("final parameters of rank 4 on n3 (cpu:0) differ"), failure


def test_two_nodes_that_disagree_with_no_majority_both_fail(tmp_path):
    # one rank each side of an even split: either may be the corrupt one
    job = Job(odd={0: (2, 5), 1: (2, 5)})
    verdicts = run_over(tmp_path, job, 2)
    assert all(f and "replicas differ after step 2" in f[0] for f, _ in verdicts.values())


def test_a_straggler_device_is_named_by_node_and_device(tmp_path):
    verdicts = run_over(tmp_path, Job(slow={"n2": 0.2}), 3)
    assert verdicts["n1"] == verdicts["n3"] == ((), "")
    (failure,) = verdicts["n2"][0]
    assert failure.startswith("straggler across nodes: cpu:0 on n2 takes 0.2 s per step"), \
        failure
    assert "above 0.01 s / 0.25" in failure


def test_a_node_that_does_not_run_fails_and_the_rest_train_without_it(tmp_path):
    job = Job(down={"n2"})
    verdicts = run_over(tmp_path, job, 3)
    assert verdicts["n1"] == verdicts["n3"] == ((), "")
    (failure,) = verdicts["n2"][0]
    assert "did not take part in the inter-node train job: ssh: connection refused" in failure
    assert job.groups == [("n1", "n2", "n3"), ("n1", "n3")]


def test_a_node_that_failed_a_single_node_check_is_left_out(tmp_path):
    job = Job()
    verdicts = run_over(tmp_path, job, 3, failed={"n3": ["train"]})
    assert verdicts["n3"] == ((), "not in the inter-node job: failed train")
    assert job.groups == [("n1", "n2")]


def test_a_loss_that_does_not_fall_fails_every_member(tmp_path):
    job = Job()
    probe = job.probe

    def flat(*args, **kwargs):
        out = probe(*args, **kwargs)
        out.data["figures"]["losses"] = [4.0] * 6
        return out
    job.probe = flat  # type: ignore[method-assign]
    verdicts = run_over(tmp_path, job, 2)
    assert all(f and f[0].startswith("the inter-node job's loss does not fall")
               for f, _ in verdicts.values()), verdicts
