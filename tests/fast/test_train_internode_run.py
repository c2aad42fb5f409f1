"""The train job across nodes (train_internode.internode and its judge) over nodes faked at
the probe's edge: each node's probe answers as the real one does for its group (its
layout, its ranks' figures, the fingerprints every rank gathers), with a replica that
leaves the others at a step, a slow device and a node that does not run. The real job
over real processes is in tests/test_train_internode.py; here, who is blamed, in
milliseconds."""

from __future__ import annotations

import json
import statistics
import threading
from dataclasses import replace

from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from support.judging import judge

from burnin.checks import CHECKS, Judging
from burnin.checks.train_internode import _median_without, excluded, internode, stragglers
from burnin.checks.train_job import job_id
from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.model.nodes import Node
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
        self.calls: dict[str, tuple[str, dict, float]] = {}  # node: (probe, settings, timeout)
        self.lock = threading.Lock()

    def probe(self, node, check, payload, timeout_s, *args, **kwargs) -> ProbeOutcome:
        if node.name in self.down:
            return ProbeOutcome(node.name, "train", False, "ssh: connection refused")
        g = payload["group"]
        with self.lock:
            self.calls[node.name] = (check.name, payload["settings"], timeout_s)
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
        sent = payload["settings"]  # the job it was sent, as the probe reports it
        spec = {"shape": {"d_model": 32}, "steps": sent["steps"], "lr": sent["lr"],
                "warmup_steps": sent["warmup_steps"], "world": world, "device": None,
                "dtype": sent.get("dtype") or ("bf16" if payload["gpus"] else "fp32")}
        figures = {"world": world, "first_rank": g["rank_offset"], "ranks_here": g["ranks_here"],
                   "mode": "inter-node", "tokens_per_s": 640.0, "steps": spec["steps"],
                   "losses": [4.0, 3.0, 2.0, 1.5, 1.2, 1.0], "diverged": diverged[:8],
                   "job_spec": spec, "job": job_id(spec), "digest": devices[0]["digest"]}
        return ProbeOutcome(node.name, "train", True, data={
            "probe": "train", "schema": 1, "node": {}, "devices": devices,
            "figures": figures, "errors": []})


def outcomes_of(tmp_path, job: Job, nodes: int | list, failed: dict | None = None,
                gpus: int = 0, checks: dict | None = None) -> dict[str, ProbeOutcome]:
    """train_internode's outcomes over `nodes` nodes (or these inventory entries), the
    inventory's `checks:` being `checks`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = tmp_path / "inv.yaml"
    entries = [{"name": f"n[1-{nodes}]"}] if isinstance(nodes, int) else nodes
    inv.write_text(json.dumps({"version": 1, "defaults": {"transport": "local", "gpus": 0},
                               "nodes": entries, **({"checks": checks} if checks else {})}))
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "t")
    group = replace(run.group_run(CHECKS["train_internode"]), probe=job.probe,
                    launcher=lambda node: None, failed=lambda: dict(failed or {}),
                    devices=lambda node: RANKS, gpus=lambda node: gpus)
    out = internode(group)
    assert set(out) == {n.name for n in run.nodes}
    for name, o in out.items():  # the controller's own record of each node, as stored
        assert (o.node, o.probe, o.ok) == (name, "train_internode", True)
        assert o.data["probe"] == CHECKS["train_internode"].probe_name == "train"
        assert CHECKS["train_internode"].schema.problem(o.data, "") == "", o.data
    return out


def run_over(tmp_path, job: Job, nodes: int | list, failed: dict | None = None, **kw):
    """{node: (failures, excluded)} of train_internode over `nodes` nodes."""
    out = outcomes_of(tmp_path, job, nodes, failed, **kw)
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


def test_the_group_figures_are_the_job_at_its_scale(tmp_path):
    # n1 (rank 0's node) and n2 report different curves and walls: the loss curve and its
    # length are rank 0's node's, the step the slowest rank's, tokens/s over the slowest wall
    job = Job()
    probe = job.probe

    def uneven(node, *args, **kwargs):
        out = probe(node, *args, **kwargs)
        if node.name == "n2":
            out.data["figures"].update(losses=[9.0, 8.0], steps=2)
            for d in out.data["devices"]:
                d.update(wall_s=0.7, step_s=0.5)
        return out
    job.probe = uneven  # type: ignore[method-assign]
    out = outcomes_of(tmp_path, job, 2)
    for name in ("n1", "n2"):
        fig = out[name].data["figures"]
        assert fig["group"] == {"members": 2, "rank0": "n1", "world": 4, "step_s": 0.5,
                                "tokens_per_s": 365.714, "losses": [4.0, 3.0, 2.0, 1.5, 1.2,
                                                                    1.0],
                                "steps": 20}, fig  # the quick profile's, as sent
        assert fig["replicas"] == []
        # each node's record keeps its own ranks' figures
        assert [(d["rank"], d["device"]) for d in out[name].data["devices"]] == (
            [(0, "cpu:0"), (1, "cpu:1")] if name == "n1" else [(2, "cpu:0"), (3, "cpu:1")])


def test_a_job_whose_ranks_report_no_wall_time_reports_no_throughput(tmp_path):
    job = Job()
    probe = job.probe

    def no_wall(*args, **kwargs):
        out = probe(*args, **kwargs)
        for d in out.data["devices"]:
            d["wall_s"] = 0
        del out.data["figures"]["steps"]
        return out
    job.probe = no_wall  # type: ignore[method-assign]
    group = outcomes_of(tmp_path, job, 2)["n1"].data["figures"]["group"]
    assert (group["tokens_per_s"], group["steps"]) == (0.0, 0)


def test_a_job_whose_first_node_reports_no_loss_curve_fails_on_it(tmp_path):
    job = _changed(Job(), lambda name, out: out.data["figures"].pop("losses"))
    out = outcomes_of(tmp_path, job, 2)
    assert out["n1"].data["figures"]["group"]["losses"] == []
    assert all(judge("train_internode", o)[0] for o in out.values())


def test_the_job_runs_the_train_probe_with_the_train_checks_settings_under_its_own(tmp_path):
    # train's settings (the inventory's, the node's group's), then train_internode's where
    # set; the job takes its first member's; each node runs under its own timeout
    nodes = [{"name": "n1", "checks": {"train": {"warmup_steps": 5, "steps": 30},
                                       "train_internode": {"timeout_s": 900}}},
             {"name": "n2", "checks": {"train": {"warmup_steps": 7, "steps": 40},
                                       "train_internode": {"timeout_s": 1200}}}]
    job = Job()
    verdicts = run_over(tmp_path, job, nodes, checks={"train": {"rendezvous_timeout_s": 90}})
    assert verdicts == {"n1": ((), ""), "n2": ((), "")}
    assert {n: (c[0], c[2]) for n, c in job.calls.items()} == {"n1": ("train", 900.0),
                                                               "n2": ("train", 1200.0)}
    for name, (_, settings, _) in job.calls.items():
        assert (settings["warmup_steps"], settings["steps"], settings["rendezvous_timeout_s"]
                ) == (5, 30, 90), name


def test_the_job_s_own_steps_replace_the_train_checks(tmp_path):
    job = Job()
    run_over(tmp_path, job, 2, checks={"train": {"steps": 30}, "train_internode": {"steps": 8}})
    assert job.calls["n1"][1]["steps"] == job.calls["n2"][1]["steps"] == 8
    job = Job()
    run_over(tmp_path / "b", job, 2, checks={"train": {"steps": 30}})
    assert job.calls["n1"][1]["steps"] == 30


def test_the_straggler_fraction_setting_and_the_gpu_default(tmp_path):
    # n2's devices 1.5x slower: under the CPU default (0.25) and under 0.5 no straggler;
    # under the GPU default (0.8) and a setting of 0.7 one
    slow = {"n2": 0.015}
    assert all(f == () for f, _ in run_over(tmp_path, Job(slow=slow), 3).values())
    assert run_over(tmp_path / "a", Job(slow=slow), 3,
                    checks={"train_internode": {"straggler_fraction": 0.5}})["n2"][0] == ()
    (failure,) = run_over(tmp_path / "b", Job(slow=slow), 3, gpus=1)["n2"][0]
    assert "above 0.01 s / 0.8, the median of the other nodes' 4 device(s)" in failure, failure
    (failure,) = run_over(tmp_path / "c", Job(slow=slow), 3,
                          checks={"train_internode": {"straggler_fraction": 0.7}})["n2"][0]
    assert "above 0.01 s / 0.7," in failure, failure


def _changed(job: Job, change) -> Job:
    """`job` whose every node's answer `change(node name, outcome)` edits."""
    probe = job.probe

    def edited(node, *args, **kwargs):
        out = probe(node, *args, **kwargs)
        if out.ok:
            change(node.name, out)
        return out
    job.probe = edited  # type: ignore[method-assign]
    return job


def test_a_job_that_leaves_one_node_fails_it_with_the_others_words(tmp_path):
    # n2 does not run: n1 alone can train no inter-node job, and says what n2's probe said
    verdicts = run_over(tmp_path, Job(down={"n2"}), 2)
    assert verdicts["n1"] == (("the inter-node train job did not complete, and no node could "
                               "be singled out (n2: ssh: connection refused)",), "")
    assert verdicts["n2"] == (("did not take part in the inter-node train job: ssh: "
                               "connection refused",), "")


def test_a_job_whose_nodes_all_report_errors_fails_every_member_with_their_words(tmp_path):
    def err(name, out):
        out.data["errors"] = [f"{name} e1", f"{name} e2"]
    verdicts = run_over(tmp_path, _changed(Job(), err), 2)
    why = ("the inter-node train job did not complete, and no node could be singled out "
           "(n1 said: n1 e1; n1 e2; n2 said: n2 e1; n2 e2)")
    assert verdicts == {"n1": ((why,), ""), "n2": ((why,), "")}


def test_a_node_that_reports_another_layout_or_no_throughput_fails_the_job(tmp_path):
    # no node said an error: none can be singled out, the job fails closed
    why = ("the inter-node train job did not complete, and no node could be singled out "
           "(no error)",)
    for i, change in enumerate((
            lambda name, out: out.data["figures"].pop("tokens_per_s"),
            lambda name, out: out.data["figures"].update(first_rank=1) if name == "n2"
            else None,
            lambda name, out: out.data["figures"].update(world=3),
            lambda name, out: out.data["devices"].pop())):
        job = _changed(Job(), change)
        assert run_over(tmp_path / str(i), job, 2) == {"n1": (why, ""), "n2": (why, "")}, i
        assert job.groups == [("n1", "n2")]  # not retried


def test_rank_0_s_node_may_leave_out_its_first_rank(tmp_path):
    job = _changed(Job(), lambda name, out: out.data["figures"].pop("first_rank")
                   if name == "n1" else None)
    assert run_over(tmp_path, job, 2) == {"n1": ((), ""), "n2": ((), "")}


def test_fewer_than_two_nodes_left_train_no_job(tmp_path):
    job = Job()
    verdicts = run_over(tmp_path, job, 2, failed={"n2": ["train"]})
    assert verdicts == {"n1": ((), "fewer than two nodes passed the single-node checks: no "
                                    "inter-node job"),
                        "n2": ((), "not in the inter-node job: failed train")}
    assert job.groups == []


def test_a_node_whose_probe_did_not_run_fails_on_the_reason():
    node = Node("n1", "n1")
    v = CHECKS["train_internode"].judge(node, ProbeOutcome("n1", "train_internode", False,
                                                           "timed out after 300 s"),
                                        Judging(settings={}))
    assert (v.node, v.check, v.failures) == ("n1", "train_internode",
                                              ("timed out after 300 s",))


def test_excluded_reads_only_a_node_that_ran():
    assert excluded(ProbeOutcome("n1", "train_internode", True, data={})) == ""
    assert excluded(ProbeOutcome("n1", "train_internode", False, "x",
                                 data={"figures": {"excluded": "y"}})) == ""


def test_a_node_that_saw_no_divergence_vouches_nothing_and_each_step_is_its_own(tmp_path):
    # every node reports rank 1 (n1's) odd after step 2 and rank 2 (n2's) after step 3, but
    # n3 saw neither and n2 gathered only ranks 0-1 (none of its own): the first step names
    # rank 1 alone, against n1's and n4's other ranks
    def change(name, out):
        out.data["figures"]["diverged"] = [] if name == "n3" else [
            {"step": 3, "fingerprints": [1, 1] + ([] if name == "n2" else [9, 1, 1, 1, 1, 1])},
            {"step": 2, "fingerprints": [1, 8] + ([] if name == "n2" else [1, 1, 1, 1, 1, 1])}]
    verdicts = run_over(tmp_path, _changed(Job(), change), 4)
    assert verdicts["n2"] == verdicts["n3"] == verdicts["n4"] == ((), "")
    assert verdicts["n1"] == ((
        "replicas differ after step 2 across nodes: rank 1 on n1 (cpu:1) holds parameters "
        "other than most ranks (fingerprint 8, the others' 1); expected bitwise identical",),
        "")


def test_where_a_rank_differs_is_read_from_its_own_nodes_document(tmp_path):
    # rank 1 (n1's) is odd after step 2; n1 located it in head.weight, while n2's document
    # says tok.weight: one node's document speaks for its own ranks only
    def change(name, out):
        tensor = "head.weight" if name == "n1" else "tok.weight"
        out.data["figures"]["diverged"] = [{
            "step": 2, "fingerprints": [1, 8, 1, 1],
            "where": {"tensor": tensor, "numel": 64, "reference_rank": 0,
                      "elements": {"1": {"count": 2, "first": 3, "last": 9}}}}]
    verdicts = run_over(tmp_path, _changed(Job(), change), 2)
    assert verdicts["n1"][0] == (
        "replicas differ after step 2 across nodes: rank 1 on n1 (cpu:1) holds parameters "
        "other than most ranks (fingerprint 8, the others' 1); expected bitwise identical; "
        "2 of head.weight's 64 elements differ from rank 0's (elements 3 to 9)",)
    assert verdicts["n2"] == ((), "")


def test_with_no_majority_every_rank_is_named_against_none(tmp_path):
    verdicts = run_over(tmp_path, Job(odd={0: (2, 5), 1: (2, 5)}), 2)
    assert verdicts["n2"][0][0] == (
        "replicas differ after step 2 across nodes: rank 2 on n2 (cpu:0) holds parameters "
        "other than any (fingerprint 1000000, the others' None); expected bitwise identical")


def test_final_digests_are_named_by_their_first_12_characters(tmp_path):
    def change(name, out):
        for d in out.data["devices"]:
            d["digest"] = "0123456789abcdef" if d["rank"] == 4 else "fedcba9876543210"
    verdicts = run_over(tmp_path, _changed(Job(), change), 3)
    assert verdicts["n3"][0] == ("final parameters of rank 4 on n3 (cpu:0) differ from most "
                                 "ranks': digest 0123456789ab, the others' fedcba987654",)


def test_a_device_exactly_at_the_straggler_bound_passes(tmp_path):
    # 0.01 / 0.5 is 0.02 exactly
    verdicts = run_over(tmp_path, Job(slow={"n2": 0.02}), 3,
                        checks={"train_internode": {"straggler_fraction": 0.5}})
    assert all(f == () for f, _ in verdicts.values()), verdicts


def test_a_straggler_needs_other_nodes_times_and_a_fraction(tmp_path):
    # n2 alone reports forward and backward times: nothing to compare them with
    def change(name, out):
        if name != "n2":
            for d in out.data["devices"]:
                d["compute_s"] = 0
    verdicts = run_over(tmp_path, _changed(Job(slow={"n2": 5.0}), change), 2)
    assert all(f == () for f, _ in verdicts.values()), verdicts
    out = outcomes_of(tmp_path / "b", Job(), 2)
    nodes = [Node("n1", "n1"), Node("n2", "n2")]
    for o in out.values():
        o.data["devices"][0]["compute_s"] = 0.5
    assert stragglers(out, nodes, 0.0) == {}


@hyp_settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.5, 1.0, 2.0, 0.25, 3.0, 0.125]) | st.floats(0.01, 10),
                min_size=2, max_size=40), st.data())
def test_the_median_without_a_nodes_own_devices_is_statisticss(values, data):
    removed = data.draw(st.lists(st.sampled_from(range(len(values))), min_size=1,
                                 max_size=len(values) - 1, unique=True))
    rest = [v for i, v in enumerate(values) if i not in removed]
    assert _median_without(sorted(values), [values[i] for i in removed]) == \
        statistics.median(rest)


def test_stragglers_read_the_fleets_times_once_not_once_a_device(monkeypatch):
    """Each device against every other node's: a median of the whole fleet per device was
    quadratic (10,000 sorts of 10,000 at 10,000 nodes)."""
    nodes = [Node(f"n{i}", f"n{i}") for i in range(300)]
    out = {n.name: ProbeOutcome(n.name, "train", True, data={"devices": [
        {"device": f"cpu:{j}", "compute_s": 1.0 + (i * 7 + j) % 13 / 100} for j in range(2)]})
        for i, n in enumerate(nodes)}
    out["n7"].data["devices"][1]["compute_s"] = 9.0
    read = []
    real = statistics.median
    monkeypatch.setattr(statistics, "median", lambda d: read.append(len(d)) or real(d))
    assert list(stragglers(out, nodes, 0.5)) == ["n7"]
    assert sum(read) <= 2 * 600, sum(read)
