"""The gpupairs check: every ordered pair of a node's GPUs, copy bandwidth both ways. The
judge's rules on recorded figures (floor, the node's own pairs over a link, the fleet,
a missing pair); the real probe on three GPUs emulated below NVML with one direction of
one pair slowed (test_hooks.slow_pair); and a run of the suites where that node fails
alone, the pair and its link named, in junit.xml, metrics.prom, summary.html and
`burnin admit`; a CPU node is not given the check."""

from __future__ import annotations

import copy
import json
import textwrap

import nvmlemu
from support.hooked import hooked_python
from support.replay import CORPUS, replay_python
from support.suiterun import REPO, junit_cases

from burnin import cli
from burnin.checks import CHECKS, Fleet, Judging, applicable, resolve_settings
from burnin.checks.gpupairs import figures
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome

CHECK = CHECKS["gpupairs"]
# Emulated GPUs copy on this machine's shared cores: small blocks in many short rounds,
# so that some round of each pair runs unpreempted (the best is reported).
TINY = {"block_mb": 1, "seconds": 0.06, "rounds": 12}


def doc(gpus: int = 4, gbps: float = 300.0, link: str = "NVLink x18",
        slow: dict[tuple[int, int], float] | None = None) -> dict:
    pairs = [{"src": f"cuda:{i}", "dst": f"cuda:{j}", "bytes": 1 << 28, "copies": 10,
              "gbps": (slow or {}).get((i, j), gbps), "link": link}
             for i in range(gpus) for j in range(gpus) if i != j]
    return {"probe": "gpupairs", "schema": 1, "node": {}, "errors": [],
            "devices": [{"device": f"cuda:{i}", "uuid": f"GPU-{i}"} for i in range(gpus)],
            "figures": {"pairs": pairs, "block_bytes": 1 << 28}}


def verdicts(docs: dict[str, dict], devices: int = 4, **settings) -> dict[str, tuple]:
    outcomes = {n: ProbeOutcome(n, "gpupairs", True, data=d) for n, d in docs.items()}
    fleet = CHECK.summarize(Fleet(outcomes))
    s = {**resolve_settings("gpupairs", "quick"), **settings}
    return {n: CHECK.judge(Node(n, n), o, Judging(settings=s, fleet=fleet, devices=devices,
                                                  gpus=devices)).failures
            for n, o in outcomes.items()}


def test_one_slow_direction_of_one_pair_is_named_with_its_link():
    got = verdicts({"a": doc(slow={(2, 1): 120.0})})
    assert got["a"] == ("cuda:2 -> cuda:1 (NVLink x18): copy 120.000 GB/s, below 0.8 x "
                        "300.000 GB/s, the median of this node's 12 pairs over that link",)


def test_a_node_whose_every_pair_is_slow_fails_against_its_peers():
    got = verdicts({"a": doc(), "b": doc(), "c": doc(), "d": doc(gbps=150.0)})
    assert got["a"] == got["b"] == got["c"] == ()
    assert len(got["d"]) == 12 and "the median of the run's 4 nodes of this model over " \
        "that link" in got["d"][0]


def test_floor_missing_pair_wrong_copy_and_count():
    (line, *rest) = verdicts({"a": doc()}, min_pair_gbps=400)["a"]
    assert len(rest) == 11 and line.endswith("below the floor of 400 GB/s")
    gone = doc()
    del gone["figures"]["pairs"][5]
    assert verdicts({"a": gone})["a"] == ("no copy bandwidth for 1 pair(s): cuda:1 -> cuda:3",)
    wrong = doc()
    wrong["errors"] = ["cuda:0 -> cuda:1: the copy arrived wrong"]
    assert verdicts({"a": wrong})["a"] == ("probe error: cuda:0 -> cuda:1: the copy arrived "
                                           "wrong",)
    assert verdicts({"a": doc(gpus=3)})["a"][0] == (
        "the probe reported 3 device(s), expected 4 (the inventory's count, or what the "
        "node's health facts showed)")


def test_figures_and_applicability():
    got = figures({"data": doc(gpus=2)})
    assert [dict(f.labels) for f in got] == [
        {"src": "cuda:0", "dst": "cuda:1", "link": "NVLink x18"},
        {"src": "cuda:1", "dst": "cuda:0", "link": "NVLink x18"}]
    assert "gpupairs" not in applicable(0, 1) and "gpupairs" in applicable(8, 1)


def emulated(tmp, name: str, gpus: int = 3) -> str:
    scenario = nvmlemu.write_scenario(tmp / f"{name}.json", {"devices": [
        {"uuid": f"GPU-{name}{i}", "pci_bus_id": f"0000:{0x18 + i:02x}:00.0"}
        for i in range(gpus)]})
    return nvmlemu.python_wrapper(tmp / f"py-{name}", scenario)


def test_a_slow_gpu_pair_fails_its_node_in_every_output(pytester, capsys):
    gpu_python = emulated(pytester.path, "n3")
    replay = replay_python(pytester.path / "replay", python=gpu_python)
    py3 = hooked_python(pytester.path / "py3", "gpupairs",
                        {"slow_pair": {"src": 2, "dst": 0, "delay_s": 0.05}}, replay,
                        real=gpu_python)
    settings = {**TINY, "peer_fraction": 0, "node_fraction": 0.25}
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        cluster: pairs
        defaults: {{transport: local, gpus: 3, gpu_model: H100-SXM5-80GB, python: {replay}}}
        checks: {{gpupairs: {json.dumps(settings)}}}
        nodes:
          - name: n[1-2]
          - name: n3
            python: {py3}
          - name: c1
            gpus: 0
        """))
    result = pytester.runpytest(
        str(REPO / "suites" / "test_health.py"), str(REPO / "suites" / "test_gpupairs.py"),
        "--inventory", str(inv), "--reports", str(pytester.path / "reports"),
        "--no-quarantine", "-p", "no:cacheprovider")
    assert result.ret == 1
    reports = pytester.path / "reports"
    cases = junit_cases(reports)
    assert cases["n1"]["gpupairs"] == cases["n2"]["gpupairs"] == ("passed", "")
    assert "gpupairs" not in cases["c1"]  # a CPU node has no GPU pair: not collected
    outcome, message = cases["n3"]["gpupairs"]
    assert outcome == "failure" and message.startswith("cuda:2 -> cuda:0 (unknown): copy"), \
        message
    latest = (reports / "latest").resolve()
    prom = (latest / "metrics.prom").read_text()
    assert ('burnin_gpupair_copy_bytes_per_second{cluster="pairs",node="n3",src="cuda:2",'
            'dst="cuda:0",link="unknown"}') in prom
    page = (latest / "summary.html").read_text()
    assert "cuda:2 -&gt; cuda:0" in page.split("id='n-n3'")[1].split("</section>")[0]
    capsys.readouterr()
    assert cli.main(["admit", str(latest / "junit.xml"), "--json", "--require",
                     "health,gpupairs"]) == 1
    admission = json.loads(capsys.readouterr().out)
    assert admission["admitted"] == ["n1", "n2"] and "n3" in admission["rejected"]
    assert "gpupairs" in " ".join(admission["rejected"]["n3"])


def test_the_recorded_document_fits_and_replays_every_pair():
    from support import replay
    shaped = replay.document("gpupairs", {"gpus": 3, "settings": {}})
    assert CHECK.schema.problem(shaped, "doc") == ""
    assert len(shaped["figures"]["pairs"]) == 6 and len(shaped["devices"]) == 3
    assert copy.deepcopy(json.loads((CORPUS / "gpupairs.gpu.json").read_text()))["errors"] == []


def test_the_real_probe_names_a_copy_that_arrives_wrong(tmp_path):
    """Two emulated GPUs; the copy from 1 to 0 corrupted after it lands: the probe says so
    for that pair alone, and the judge fails the node with it."""
    import subprocess
    python = emulated(tmp_path, "w", gpus=2)
    payload = {"gpus": 2, "settings": {**TINY, "rounds": 2},
               "test_hooks": {"corrupt_pair": [1, 0]}}
    out = subprocess.run([python, str(REPO / "probes" / "gpupairs.py")], check=True,
                         input=json.dumps(payload), capture_output=True, text=True,
                         timeout=120)
    got = json.loads(out.stdout)
    assert got["errors"] == ["cuda:1 -> cuda:0: RuntimeError: the copy arrived wrong"]
    assert [(p["src"], p["dst"]) for p in got["figures"]["pairs"]] == [("cuda:0", "cuda:1")]
    failures = verdicts({"a": got}, devices=2)["a"]
    assert failures[0] == "probe error: cuda:1 -> cuda:0: RuntimeError: the copy arrived wrong"
    assert failures[1] == "no copy bandwidth for 1 pair(s): cuda:1 -> cuda:0"
