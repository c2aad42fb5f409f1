"""The collectives check: nccl-tests' bus-bandwidth factors, exact results, the peer rule
per operation; the real probe on this machine's CPU (gloo) with one operation slowed below
its timing (test_hooks.slow); and a run of the suites where that node fails alone, named by
operation, in junit.xml, metrics.prom, summary.html and `burnin admit`."""

from __future__ import annotations

import copy
import json
import sys
import textwrap
from pathlib import Path

from support.hooked import hooked_python
from support.judging import outcome
from support.replay import CORPUS, replay_python
from support.suiterun import REPO, junit_cases

from burnin import cli
from burnin.checks import CHECKS, Fleet, Judging, resolve_settings
from burnin.checks.collectives import OPS, figures
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

sys.path.insert(0, str(REPO / "probes"))
import collectives as probe  # noqa: E402

sys.path.pop(0)

CHECK = CHECKS["collectives"]
TINY = {"min_bytes": 65536, "max_bytes": 262144, "seconds_per_size": 0.02}
CPU_PEERS = 0.5  # on a CPU node the peer rule is on only where the inventory says so
CPU = Node("local", "localhost", transport="local", gpus=0)


def recorded(kind: str = "cpu") -> dict:
    return json.loads((CORPUS / f"collectives.{kind}.json").read_text())


def scaled(doc: dict, op: str, share: float) -> dict:
    doc = copy.deepcopy(doc)
    for size in doc["figures"]["ops"][op]:
        size["busbw_gbps"] *= share
    return doc


def verdicts(docs: dict[str, dict], gpus: int = 0, **settings) -> dict[str, tuple]:
    outcomes = {n: ProbeOutcome(n, "collectives", True, data=d) for n, d in docs.items()}
    fleet = CHECK.summarize(Fleet(outcomes))
    s = {**resolve_settings("collectives", "quick"), "peer_fraction": CPU_PEERS, **settings}
    out = {}
    for n, o in outcomes.items():
        v = CHECK.judge(Node(n, n), o, Judging(settings=s, fleet=fleet,
                                               devices=None if gpus else 1, gpus=gpus))
        out[n] = v.failures
    return out


def test_bus_bandwidth_factors_are_nccl_tests():
    """doc/PERFORMANCE.md: (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for
    send/recv."""
    assert [probe.factor(op, 8) for op in OPS] == [7 / 8, 7 / 8, 7 / 8, 1.0]
    assert probe.factor("all_gather", 2) == 0.5


def test_the_peer_rule_is_off_on_cpu_nodes_unless_the_inventory_sets_it():
    doc = recorded()
    docs = {"a": doc, "b": doc, "c": doc, "d": scaled(doc, "all_to_all", 0.2)}
    assert verdicts(docs, peer_fraction=None)["d"] == ()
    assert verdicts(docs, gpus=8, peer_fraction=None)["d"][0].startswith("all-to-all busbw")


def test_one_slow_operation_among_peers_fails_that_node_naming_it():
    doc = recorded()
    got = verdicts({"a": doc, "b": doc, "c": doc, "d": scaled(doc, "all_to_all", 0.2)})
    assert got["a"] == got["b"] == got["c"] == ()
    (line,) = got["d"]
    assert line.startswith("all-to-all busbw") and "the median of the run's 4 nodes" in line


def test_floor_from_the_inventory_and_wrong_elements_and_a_missing_operation_fail():
    doc = recorded()
    best = max(s["busbw_gbps"] for s in doc["figures"]["ops"]["send_recv"])
    (line,) = verdicts({"a": doc}, min_send_recv_gbps=best * 2)["a"]
    assert line.startswith("send/recv busbw") and f"floor of {best * 2:g} GB/s" in line
    wrong = copy.deepcopy(doc)
    wrong["figures"]["ops"]["reduce_scatter"][0]["wrong_elements"] = 3
    assert verdicts({"a": wrong})["a"] == (
        "3 wrong elements in the reduce-scatter result at 0.0625 MiB, expected exact values",)
    gone = copy.deepcopy(doc)
    del gone["figures"]["ops"]["all_gather"]
    assert verdicts({"a": gone})["a"] == ("no all-gather sweep was reported",)


def test_a_node_that_ran_fewer_ranks_than_its_devices_fails():
    o = outcome("collectives", recorded()["devices"], recorded()["figures"])
    v = CHECK.judge(Node("n1", "n1"), o, Judging(
        settings=resolve_settings("collectives", "quick"), devices=4, gpus=4))
    assert v.failures == ("the probe ran 2 rank(s), expected 4 (one per device)",)


def test_figures_name_each_operation():
    got = figures({"data": recorded()})
    assert sorted(dict(f.labels)["op"] for f in got) == sorted(OPS)
    assert {dict(f.labels)["bytes"] for f in got} == {"262144"}


def run(slow: dict | None = None) -> dict:
    payload = {"gpus": 0, "settings": TINY}
    if slow:
        payload["test_hooks"] = {"slow": slow}
    out = run_probe(LocalTransport(CPU, REPO / "probes"), "collectives", payload,
                    timeout_s=120)
    assert out.ok, out.reason
    assert out.data["errors"] == [] and out.data["figures"]["world"] == 2
    return out.data


def test_the_real_probe_is_exact_and_a_slowed_send_recv_fails_alone():
    healthy = run()
    assert all(s["wrong_elements"] == 0 for op in OPS for s in healthy["figures"]["ops"][op])
    slowed = run({"op": "send_recv", "rank": 1, "delay_s": 0.03})
    got = verdicts({"a": healthy, "b": healthy, "c": slowed})
    assert got["a"] == got["b"] == ()
    assert any(f.startswith("send/recv busbw") for f in got["c"]), got["c"]


def test_a_slow_collective_fails_its_node_in_every_output(pytester, capsys):
    replay = replay_python(pytester.path / "replay")
    py3 = hooked_python(pytester.path / "py3", "collectives",
                        {"slow": {"op": "send_recv", "rank": 1, "delay_s": 0.03}}, replay)
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        cluster: coll
        defaults: {{transport: local, gpus: 0, python: {replay}}}
        checks: {{collectives: {json.dumps({**TINY, "peer_fraction": CPU_PEERS})}}}
        nodes:
          - name: n[1-2]
          - name: n3
            python: {py3}
        """))
    result = pytester.runpytest(
        str(REPO / "suites" / "test_health.py"), str(REPO / "suites" / "test_collectives.py"),
        "--inventory", str(inv), "--reports", str(pytester.path / "reports"),
        "--no-quarantine", "-p", "no:cacheprovider")
    assert result.ret == 1
    reports = pytester.path / "reports"
    cases = junit_cases(reports)
    assert cases["n1"]["collectives"] == cases["n2"]["collectives"] == ("passed", "")
    outcome_, message = cases["n3"]["collectives"]
    assert outcome_ == "failure" and "send/recv busbw" in message, message
    latest = (reports / "latest").resolve()
    prom = (latest / "metrics.prom").read_text()
    assert ('burnin_collectives_busbw_bytes_per_second{cluster="coll",node="n1",'
            'op="send_recv"') in prom
    assert ('burnin_check_outcome{cluster="coll",node="n3",check="collectives",'
            'outcome="failed"} 1') in prom
    page = (latest / "summary.html").read_text()
    assert "send/recv busbw" in page.split("id='n-n3'")[1].split("</section>")[0]
    capsys.readouterr()
    assert cli.main(["admit", str(latest / "junit.xml"), "--json", "--require",
                     "health,collectives"]) == 1
    admission = json.loads(capsys.readouterr().out)
    assert admission["admitted"] == ["n1", "n2"] and list(admission["rejected"]) == ["n3"]


def test_the_recorded_documents_fit_the_declared_shape():
    for kind in ("cpu", "gpu"):
        assert CHECK.schema.problem(recorded(kind), "doc") == ""
    assert Path(REPO / "probes" / "collectives.py").exists()
