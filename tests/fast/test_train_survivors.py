"""Inputs of the train judges that their other tests left out: a fleet whose first node ran
another job than it was sent, a CPU node that reports one rank, a node alone in its job
that did not vote, a rank only half the nodes saw leave, a rank only the other nodes saw
leave, and a member whose document ran another dtype than its group was sent."""

from __future__ import annotations

import copy

from fast.test_judge_train import doc, outcome
from fast.test_train_internode_run import Job, outcomes_of
from support.judging import judge as judge_record

from burnin.checks import Fleet, Judging
from burnin.checks.train import fleet_summary, judge
from burnin.checks.train_internode import replicas
from burnin.checks.train_job import job_id
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome


def cpu(name: str) -> Node:
    return Node(name=name, address=name, gpus=0)


def respec(d: dict, **spec) -> dict:
    """`d` having run a job of these spec fields, its job id its spec's."""
    d = copy.deepcopy(d)
    d["figures"]["job_spec"].update(spec)
    d["figures"]["job"] = job_id(d["figures"]["job_spec"])
    return d


def one_rank(d: dict) -> dict:
    """`d` as a CPU node that ran one rank reports it."""
    d = copy.deepcopy(d)
    d["devices"] = d["devices"][:1]
    d["figures"]["world"] = 1
    return respec(d, world=1)


def test_a_node_that_ran_another_job_than_it_was_sent_does_not_end_the_count():
    # n1 comes first and was sent 9 steps but ran 6: it is left out; n2 and n3 still count
    names = ("n1", "n2", "n3")
    fleet = Fleet({n: outcome(n, doc()) for n in names}, nodes={n: cpu(n) for n in names},
                  settings={"n1": {"steps": 9}})
    summary = fleet_summary(fleet)
    assert summary["jobs"] == {doc()["figures"]["job"]: 2}
    assert list(summary["sent"].values()) == [2]


def test_a_cpu_node_that_reports_one_rank_is_counted_and_judged_without_an_error():
    d = one_rank(doc())
    summary = fleet_summary(Fleet({"n1": outcome("n1", d)}, nodes={"n1": cpu("n1")}))
    assert summary["jobs"] == {d["figures"]["job"]: 1}
    v = judge(cpu("n1"), outcome("n1", d), Judging({}, summary, gpus=0, devices=1))
    # it was sent the ranks setting's two ranks: it fails for that, and says so
    assert any("1" in f and "2" in f for f in v.failures), v.failures


def test_a_node_alone_in_its_job_that_did_not_vote_fails_for_it():
    # n2..n4 ran the job; n1 said an error (it does not vote) and ran a job of its own
    names = ("n1", "n2", "n3", "n4")
    mine = respec(doc(), torch="2.0.0+cpu")
    mine["errors"] = ["a rank said something"]
    outs = {n: outcome(n, mine if n == "n1" else doc()) for n in names}
    summary = fleet_summary(Fleet(outs, devices={n: 1 for n in names},
                                  nodes={n: cpu(n) for n in names}))
    assert mine["figures"]["job"] not in summary["jobs"]
    assert list(summary["sent"].values()) == [3]
    v = judge(cpu("n1"), outs["n1"], Judging({}, summary, gpus=0, devices=1))
    assert any(f.startswith("alone in its job: 3 nodes") for f in v.failures), v.failures


def member(name: str, ranks: list[int], diverged: list[dict]) -> ProbeOutcome:
    return ProbeOutcome(name, "train", True, data={
        "probe": "train", "schema": 1, "node": {}, "errors": [],
        "devices": [{"rank": r, "device": "cpu:0", "digest": "d"} for r in ranks],
        "figures": {"diverged": diverged}})


def test_a_rank_only_half_the_nodes_saw_leave_is_not_blamed_on_their_word():
    # rank 3 is n4's; n1 and n2 say it left at step 5, n3 and n4 saw nothing: two of four
    # is no majority, and no node's own document names it
    event = [{"step": 5, "fingerprints": [1, 1, 1, 2]}]
    nodes = [cpu(f"n{i}") for i in range(1, 5)]
    outs = {n.name: member(n.name, [i], event if i < 2 else []) for i, n in enumerate(nodes)}
    assert replicas(outs, nodes) == {}
    # three of four (its own node still silent) name it
    outs["n3"] = member("n3", [2], event)
    assert list(replicas(outs, nodes)) == ["n4"]


def test_a_rank_most_nodes_saw_leave_at_that_step_is_blamed_though_its_node_is_silent():
    # rank 2 is n3's; n1 and n2 saw it leave at step 5, n3 says nothing of it
    event = [{"step": 5, "fingerprints": [1, 1, 2]}]
    nodes = [cpu(f"n{i}") for i in range(1, 4)]
    outs = {n.name: member(n.name, [i], event if i < 2 else []) for i, n in enumerate(nodes)}
    (failure,) = replicas(outs, nodes)["n3"]
    assert "after step 5" in failure and "2 of the 3 nodes saw it" in failure, failure


class OtherDtype(Job):
    """n2's document says it ran bf16 on CPUs, whose job is fp32."""

    def probe(self, node, *args, **kwargs) -> ProbeOutcome:
        o = super().probe(node, *args, **kwargs)
        if node.name == "n2":
            fig = o.data["figures"]
            fig["job_spec"]["dtype"] = "bf16"
            fig["job"] = job_id(fig["job_spec"])
        return o


def test_a_member_that_ran_another_dtype_than_its_group_was_sent_fails_alone(tmp_path):
    out = outcomes_of(tmp_path, OtherDtype(), 3)
    verdicts = {n: judge_record("train_internode", o)[0] for n, o in out.items()}
    assert verdicts["n1"] == verdicts["n3"] == ()
    (failure,) = verdicts["n2"]
    assert "dtype 'bf16' differs from the 'fp32'" in failure, failure
