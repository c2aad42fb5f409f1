"""The collectives across nodes on real processes: three 'nodes' on the local transport,
each its own probe and gloo rank, one group over TCP between them; one node whose
all-to-all is slowed below its timing (probes/collectives.py test_hooks.slow) is found by
the same localisation as the inter-node all-reduce's (pairs at three nodes; the group
search from four, in tests/fast/test_collectives_internode_run.py) and named, alone, in
junit.xml, metrics.prom, summary.html and `burnin admit`. The decisions themselves
(the searches sharing launches, a group's figure) on documents, without processes; the
reduce-scatter inputs' exactness at any world the probe takes."""

from __future__ import annotations

import json
import sys
import textwrap

from support.hooked import hooked_python
from support.replay import replay_python
from support.suiterun import REPO, junit_cases, run_suite, script

from burnin import cli
from burnin.checks import CHECKS, Judging
from burnin.checks.collectives import OPS
from burnin.checks.collectives_internode import Shared, group_ops
from burnin.checks.group_run import Facts
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome

CHECK = CHECKS["collectives_internode"]
# One size, three iterations a size (the fewest timed_collective runs): a slowed
# all-to-all waits 200 ms an iteration, against about 0.3 ms for a healthy pair on an idle
# machine and up to 10 ms seen on these loaded cores; below 0.1 of the fast pairs still
# when a healthy one starves that far (a 50 ms wait was not: a healthy pair at 10 ms a
# call made 0.1 of it the slowed pair's own figure).
TINY = {"min_bytes": 65536, "max_bytes": 65536, "seconds_per_size": 0.001, "warmup": 2,
        "rendezvous_timeout_s": 20}
INTER = {"pair_fraction": 0.1}


def test_a_node_slow_in_all_to_all_alone_is_found_and_named_in_every_output(pytester,
                                                                             capsys):
    quiet = script(pytester.path / "python", f"OMP_NUM_THREADS=1 exec {sys.executable} "
                                             "\"$@\"\n")
    replay = replay_python(pytester.path / "replay", real_in_groups=("collectives",),
                           python=quiet)
    slow = hooked_python(pytester.path / "slow", "collectives",
                         {"slow": {"op": "all_to_all", "rank": 0, "delay_s": 0.2}}, replay,
                         real=quiet)
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        cluster: coll
        defaults: {{transport: local, gpus: 0, python: {replay}}}
        checks:
          collectives: {json.dumps(TINY)}
          collectives_internode: {json.dumps(INTER)}
        nodes:
          - name: n[1-2]
          - name: n3
            python: {slow}
        """))
    result, reports = run_suite(pytester, inv, "-k", "collectives_internode",
                                "--no-quarantine")
    cases = junit_cases(reports)
    for n in ("n1", "n2"):
        assert cases[n]["collectives_internode"] == ("passed", ""), cases[n]
    outcome, message = cases["n3"]["collectives_internode"]
    assert outcome == "failure", message
    assert message.startswith("localised as the slow node: all-to-all: ") and \
        "with known-good" in message, message
    assert result.ret == 1
    latest = (reports / "latest").resolve()
    records = {r["node"]: r for r in map(json.loads, (latest / "results.jsonl").open())
               if r["check"] == "collectives_internode"}
    group = records["n1"]["data"]["figures"]["group"]
    assert group["members"] == 3 and set(group["ops"]) == set(OPS)
    # Every operation was sought (no floor on CPUs: the fleet's fast pairs judge), and only
    # all-to-all's found anyone.
    sought = {p["op"] for r in records.values() for p in r["data"]["figures"]["pairs"]}
    assert sought == set(OPS)
    prom = (latest / "metrics.prom").read_text()
    assert ('burnin_collectives_internode_busbw_bytes_per_second{cluster="coll",node="n1",'
            'op="all_to_all"') in prom
    assert ('burnin_check_outcome{cluster="coll",node="n3",check="collectives_internode",'
            'outcome="failed"} 1') in prom
    page = (latest / "summary.html").read_text()
    section = page.split("id='n-n3'")[1].split("</section>")[0]
    assert "localised as the slow node: all-to-all" in section
    assert "group tested" in section and "all_to_all" in section  # its page part
    capsys.readouterr()
    assert cli.main(["admit", str(latest / "junit.xml"), "--json", "--require",
                     "collectives_internode"]) == 1
    admission = json.loads(capsys.readouterr().out)
    assert admission["admitted"] == ["n1", "n2"]
    assert list(admission["rejected"]) == ["n3"]


def _member(name: str, first: int, busbw: dict[str, float]) -> ProbeOutcome:
    ops = {op: [{"bytes": 1 << 20, "busbw_gbps": b, "wrong_elements": 0}]
           for op, b in busbw.items()}
    return ProbeOutcome(name, "collectives", True, data={
        "probe": "collectives", "schema": 1, "node": {}, "errors": [],
        "devices": [{"rank": first, "wrong_elements": 0}],
        "figures": {"world": 2, "first_rank": first, "ranks_here": 1, "ops": ops}})


def test_a_groups_figure_is_its_slowest_members_per_operation_and_needs_every_one():
    nodes = [Node("a", "a"), Node("b", "b")]
    facts = Facts({"a": 1, "b": 1}, {"a": 0, "b": 0})
    fast = dict.fromkeys(OPS, 2.0)
    outs = {"a": _member("a", 0, fast), "b": _member("b", 1, {**fast, "send_recv": 0.5})}
    got = group_ops(outs, nodes, facts)
    assert got is not None
    assert got["send_recv"]["busbw_gbps"] == 0.5 and got["all_gather"]["busbw_gbps"] == 2.0
    short = {op: b for op, b in fast.items() if op != "all_to_all"}
    assert group_ops({**outs, "b": _member("b", 1, short)}, nodes, facts) is None
    # a member that reports another layout leaves the group incomplete
    assert group_ops({**outs, "b": _member("b", 0, fast)}, nodes, facts) is None


def test_the_searches_share_launches_but_none_reads_its_own_twice():
    calls = []

    def launch(nodes):
        calls.append(tuple(n.name for n in nodes))
        return {op: {"bytes": 1, "busbw_gbps": float(len(calls))} for op in OPS}

    shared = Shared(launch)
    pair = [Node("a", "a"), Node("b", "b")]
    assert shared.of("all_gather")(pair) == {"busbw_gbps": 1.0}
    assert shared.of("all_to_all")(pair) == {"busbw_gbps": 1.0}  # the same launch
    # a confirmation within one operation's search is a new launch, never the old figure
    assert shared.of("all_gather")(pair) == {"busbw_gbps": 2.0}
    assert calls == [("a", "b"), ("a", "b")]


def _judge(figures: dict) -> tuple[str, ...]:
    o = ProbeOutcome("n1", "collectives_internode", True, data={
        "probe": "collectives", "schema": 1, "node": {}, "devices": [], "errors": [],
        "figures": figures})
    return CHECK.judge(Node("n1", "n1"), o, Judging(settings={})).failures


def test_the_judge_names_the_operation_and_fails_wrong_elements_and_group_failures():
    group = {"members": 4, "rank0": "n1",
             "ops": {op: {"bytes": 1 << 20, "busbw_gbps": 1.0} for op in OPS}}
    assert _judge({"group": group}) == ()
    (line,) = _judge({"group": group, "slow_with_good_partner": True,
                      "verdict": "all-to-all: 0.010 GB/s with known-good n2"})
    assert line.startswith("localised as the slow node: all-to-all: 0.010 GB/s") and \
        "the group of 4 nodes" in line
    assert _judge({"group": group, "wrong_elements": 3}) == (
        "3 wrong elements in this node's collectives results, expected exact values",)
    assert _judge({"group_failure": "did not take part"}) == ("did not take part",)


def test_reduce_scatter_sums_stay_exact_in_fp32_for_any_world_the_probe_takes():
    """Across nodes a world is every node's ranks: reduce-scatter's inputs are the rank
    mod 64 (as all-reduce's), so its largest sum stays below 2**24 up to MAX_WORLD; the
    rank itself made it 18,003,000 at 6,000 ranks, past what fp32 holds exactly."""
    import torch

    sys.path.insert(0, str(REPO / "probes"))
    try:
        import collectives as probe
    finally:
        sys.path.pop(0)
    world = 130  # past 64: ranks whose inputs repeat still sum to the expected chunk
    ins = [probe.buffers(torch, "reduce_scatter", 4 * world, r, world, "cpu")
           for r in range(world)]
    total = sum(bufs["in"].double() for bufs, _ in ins)
    for rank, (_, want) in enumerate(ins):
        assert torch.equal(total[rank:rank + 1], want.double())
    _, want = probe.buffers(torch, "reduce_scatter", 4 * probe.MAX_WORLD, 60,
                            probe.MAX_WORLD, "cpu")
    assert probe.MAX_WORLD == 100_000 and float(want.max()) < 2 ** 24
