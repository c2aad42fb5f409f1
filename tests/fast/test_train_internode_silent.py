"""train_internode: the host of a diverging rank cannot clear it by keeping quiet. Every
rank gathers every rank's fingerprint after each step, so every node's document shows
a rank that left the others; its own node used to be the only one asked (the others'
documents were read for their own ranks alone), and a host that left out `diverged`
and reported the common digest passed with every other node. Members answer with the
project's own recorded document (tests/corpus/train.cpu.json) shaped to their place in
the group, as tests/support/replay.py does."""

from __future__ import annotations

import json
from dataclasses import replace

from support.judging import judge
from support.replay import document

from burnin.checks import CHECKS
from burnin.checks.train_internode import internode
from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.probe.protocol import ProbeOutcome

RANKS = 2
GOOD, ODD = 1_000_000, 7


class Members:
    """Each member answers with the recorded document at its ranks; rank `odd` leaves the
    others from step `at` on, which every member's event shows, save those `silent`,
    whose documents leave the divergence out and report the common digest."""

    def __init__(self, odd: int, at: int, silent=(), lying=()):
        self.odd, self.at, self.silent, self.lying = odd, at, set(silent), set(lying)

    def probe(self, node, check, payload, timeout_s, *args, **kwargs) -> ProbeOutcome:
        g = payload["group"]
        doc = document("train", payload)  # the recorded document, at the job it was sent
        common = doc["devices"][0]["digest"]
        for d in doc["devices"]:
            if d["rank"] == self.odd and node.name not in self.silent:
                d["digest"] = "f" * 64
        steps = len(doc["figures"]["losses"])
        events = [{"step": s, "fingerprints": [
            ODD if r == self.odd and node.name not in self.lying else GOOD
            for r in range(g["world"])]} for s in range(self.at, steps + 1)]
        doc["figures"].update(diverged=[] if node.name in self.silent else events[:8],
                              digest=common)
        return ProbeOutcome(node.name, "train", True, data=doc)


def verdicts(tmp_path, members: Members, nodes: int) -> dict[str, tuple]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"version": 1, "defaults": {"transport": "local", "gpus": 0},
                               "nodes": [{"name": f"n[1-{nodes}]"}]}))
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "t")
    group = replace(run.group_run(CHECKS["train_internode"]), probe=members.probe,
                    launcher=lambda node: None, failed=dict, devices=lambda node: RANKS,
                    gpus=lambda node: 0)
    return {name: judge("train_internode", o)[0] for name, o in internode(group).items()}


def test_the_host_of_a_diverging_rank_fails_though_its_document_is_silent(tmp_path):
    # rank 3 is n2's second rank; n2 leaves it out and reports the common digest
    got = verdicts(tmp_path, Members(odd=3, at=4, silent=["n2"]), 3)
    assert got["n1"] == got["n3"] == (), got
    (failure,) = got["n2"]
    assert failure == ("replicas differ after step 4 across nodes: rank 3 on n2 (cpu) "
                       "holds parameters other than most ranks', as 2 of the 3 nodes saw it "
                       "(its own node's document says nothing of it); expected bitwise "
                       "identical")


def test_a_host_whose_events_give_its_rank_the_common_fingerprint_fails(tmp_path):
    got = verdicts(tmp_path, Members(odd=3, at=4, silent=["n2"], lying=["n2"]), 3)
    got2 = verdicts(tmp_path / "2", Members(odd=3, at=4, lying=["n2"]), 3)
    assert got["n1"] == got["n3"] == got2["n1"] == got2["n3"] == (), (got, got2)
    assert "says nothing of it" in got["n2"][0]
    (failure,) = got2["n2"]
    assert "(its own node's document gives it the common fingerprint 1000000)" in failure


def test_a_host_that_reports_the_divergence_itself_is_named_as_before(tmp_path):
    got = verdicts(tmp_path, Members(odd=3, at=4), 3)
    assert got["n1"] == got["n3"] == (), got
    (failure,) = got["n2"]
    assert failure.startswith("replicas differ after step 4 across nodes: rank 3 on n2 "
                              "(cpu) holds parameters other than most ranks (fingerprint 7")


def test_a_member_whose_document_ran_another_job_fails_alone(tmp_path):
    members = Members(odd=-1, at=99)  # no rank leaves the others
    plain = members.probe

    def probe(node, *args, **kwargs):
        out = plain(node, *args, **kwargs)
        if node.name == "n3":
            out.data["figures"]["job_spec"]["lr"] = 0.5
        return out
    members.probe = probe  # type: ignore[method-assign]
    got = verdicts(tmp_path, members, 3)
    assert got["n1"] == got["n2"] == (), got
    (failure,) = got["n3"]
    assert failure.startswith("its document's job differs from the one the controller sent: "
                              "its job id ")
    assert "its job's lr 0.5 differs from the 0.003 the controller sent" in failure


def test_one_node_alone_cannot_name_another_nodes_rank(tmp_path):
    """Of four nodes, only n1 says n3's rank 5 left the others: not most nodes. (The
    final digests all agree: nobody is named.)"""
    got = verdicts(tmp_path, Members(odd=5, at=4, silent=["n2", "n3", "n4"]), 4)
    assert got == {n: () for n in ("n1", "n2", "n3", "n4")}, got
