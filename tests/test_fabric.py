"""The fabric check: fake /sys/class/infiniband trees (a port down, a port at half rate, a
missing HCA, a port that flaps while the probe watches) and emulated NVML (an NVLink link
down) each fail exactly their node, named by HCA and port or by GPU index and UUID; the
judge's rules against recorded documents; the inventory's `hcas:`."""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path

import nvmlemu
import pytest
from support.suiterun import junit_cases, run_suite

from burnin.checks import Fleet, Judging, resolve_settings
from burnin.checks.fabric import figures, fleet_summary
from burnin.checks.fabric import judge as fabric_judge
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.model.gpu_reference import GPU_MODELS
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome

SETTINGS = resolve_settings("fabric", "quick", {})
NDR = "400 Gb/sec (4X NDR)"
HDR = "200 Gb/sec (4X HDR)"


def port(state: str = "4: ACTIVE", phys: str = "5: LinkUp", rate: str = NDR,
         link_layer: str = "InfiniBand", **counters: int) -> dict:
    return {"state": state, "phys_state": phys, "rate": rate, "link_layer": link_layer,
            "counters": {"symbol_error": 0, "link_downed": 1, "port_rcv_errors": 0,
                         **counters}}


def ib_tree(root: Path, hcas: dict[str, list[dict]]) -> Path:
    """A fake /sys/class/infiniband: {hca: [port, ...]}, ports numbered from 1."""
    for name, ports in hcas.items():
        for n, p in enumerate(ports, 1):
            d = root / name / "ports" / str(n)
            (d / "counters").mkdir(parents=True)
            for key in ("state", "phys_state", "rate", "link_layer"):
                (d / key).write_text(p[key] + "\n")
            for counter, value in p["counters"].items():
                (d / "counters" / counter).write_text(f"{value}\n")
    root.mkdir(parents=True, exist_ok=True)
    return root


def two_hcas(**overrides) -> dict[str, list[dict]]:
    return {"mlx5_0": [port()], "mlx5_1": [port()], **overrides}


def several_nics() -> dict[str, list[dict]]:
    """An 8-GPU node with several NICs: one 400G NDR InfiniBand HCA per GPU for the
    compute fabric, and a dual-port Ethernet (RoCE) NIC for storage, here on a 200G
    network; the kernel lists RoCE ports under /sys/class/infiniband too."""
    compute = {f"mlx5_{i}": [port()] for i in range(8)}
    storage = {"mlx5_8": [port(rate="200 Gb/sec (4X HDR)", link_layer="Ethernet")] * 2}
    return {**compute, **storage}


def keep_growing(path: Path, stop: threading.Event) -> None:
    """A counter that grows all along the run, as a flapping port's link_downed does."""
    value = int(path.read_text())
    spare = path.with_name(".next")
    while not stop.wait(0.05):
        value += 1
        spare.write_text(f"{value}\n")
        spare.replace(path)  # whole, as sysfs gives a value: never a half-written file


def test_each_broken_fabric_fails_its_node_alone_with_the_port_named(pytester, tmp_path):
    trees = {
        "clean1": two_hcas(), "clean2": two_hcas(),
        "down": two_hcas(mlx5_1=[port("1: DOWN", "3: Disabled")]),
        "half": two_hcas(mlx5_0=[port(rate=HDR)]),
        "missing": {"mlx5_0": [port()]},
        "flaps": two_hcas(),
    }
    nodes = "".join(f"      - name: {name}\n        checks:\n          fabric: {{sysfs_root: "
                    f"{ib_tree(tmp_path / name, hcas)}}}\n" for name, hcas in trees.items())
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent("""\
        version: 1
        defaults: {transport: local, gpus: 0}
        checks:
          fabric: {window_s: 1.5}
        # four nodes broken on purpose, each its own way: no shared cause here
        quarantine: {shared_cause: {min_nodes: 7}}
        nodes:
        """) + nodes)
    stop = threading.Event()
    grower = threading.Thread(target=keep_growing, daemon=True, args=(
        tmp_path / "flaps/mlx5_1/ports/1/counters/link_downed", stop))
    grower.start()
    try:
        result, reports = run_suite(pytester, inv, "-k", "fabric")
    finally:
        stop.set()
        grower.join()
    cases = {n: c["fabric"] for n, c in junit_cases(reports).items()}
    assert cases["clean1"] == cases["clean2"] == ("passed", "")
    assert {n for n, (outcome, _) in cases.items() if outcome != "passed"} == {
        "down", "half", "missing", "flaps"}
    assert cases["down"][1] == ("mlx5_1 port 1: state DOWN, expected ACTIVE; mlx5_1 port 1: "
                                "phys_state Disabled, expected LinkUp")
    assert cases["half"][1] == ("mlx5_0 port 1: rate 200 Gb/sec (4X HDR), expected 400 "
                                "Gb/sec (the InfiniBand rate of most of the run's 6 nodes)")
    assert cases["missing"][1] == (f"1 HCA(s) under {tmp_path / 'missing'} (mlx5_0), "
                                   "expected 2 (most of the run's 6 nodes)")
    assert cases["flaps"][1].startswith("mlx5_1 port 1: link_downed grew by ")
    assert cases["flaps"][1].endswith(" in 1.5 s: the port flapped")
    (record,) = [json.loads(ln) for ln in (reports / "latest" / "results.jsonl").open()
                 if json.loads(ln)["node"] == "flaps"]
    assert record["data"]["figures"]["ib"]["window_s"] == 1.5


def test_an_nvlink_link_down_fails_that_gpu_by_index_and_uuid(pytester, nvml, tmp_path):
    uuids = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(2)]
    nvml(devices=[{"uuid": u} for u in uuids])
    bad = tmp_path / "bad.json"
    nvmlemu.write_scenario(bad, {"devices": [{"uuid": uuids[0]},
                                             {"uuid": uuids[1], "nvlink": {"down": [7]}}]})
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 2, gpu_model: H100-SXM5-80GB}}
        checks:
          fabric: {{sysfs_root: {tmp_path / 'no-ib'}}}
        nodes:
          - name: good
          - name: bad
            python: {nvmlemu.python_wrapper(tmp_path / 'py', bad)}
        """))
    result, reports = run_suite(pytester, inv, "-k", "fabric")
    cases = {n: c["fabric"] for n, c in junit_cases(reports).items()}
    assert cases == {"good": ("passed", ""), "bad": (
        "failure", f"GPU 1 (NVIDIA H100 80GB HBM3, {uuids[1]}): 17 NVLink link(s) active "
        "of 18, expected 18 (down: link 7)")}


# --- the judge's rules against recorded documents -------------------------------------

def recorded(hcas: dict[str, list[dict]], devices=(), window: float = 10.0,
             nvlink: dict | None = None) -> ProbeOutcome:
    doc_hcas = []
    for name, ports in hcas.items():
        doc_ports = []
        for n, p in enumerate(ports, 1):
            code, _, state = p["state"].partition(": ")
            phys_code, _, phys = p["phys_state"].partition(": ")
            before = p["counters"]
            growth = p.get("growth", {})
            doc_ports.append({"port": str(n), "state": state, "state_code": int(code),
                              "phys_state": phys, "phys_state_code": int(phys_code),
                              "rate": p["rate"], "rate_gbps": float(p["rate"].split()[0]),
                              "link_layer": "InfiniBand", "before": before,
                              "after": {k: v + growth.get(k, 0) for k, v in before.items()},
                              "growth": {k: growth.get(k, 0) for k in before}})
        doc_hcas.append({"name": name, "ports": doc_ports})
    figs = {"ib": {"root": "/sys/class/infiniband", "hcas": doc_hcas, "window_s": window},
            "nvlink": nvlink or {"read": True}}
    return ProbeOutcome("n", "fabric", True, data={"probe": "fabric", "schema": 1, "node": {},
                                                   "devices": list(devices), "figures": figs,
                                                   "errors": []})


def verdicts(fleet: dict[str, ProbeOutcome], nodes: dict[str, Node] | None = None,
             gpus: int = 0, model: str | None = None, **settings) -> dict:
    summary = fleet_summary(Fleet(fleet))
    nodes = nodes or {}
    return {n: fabric_judge(nodes.get(n, Node(name=n, address=n, gpus=gpus)), o,
                            Judging({**SETTINGS, **settings}, summary, GPU_MODELS.get(model or ""),
                                    gpus or 1, gpus))
            for n, o in fleet.items()}


def test_a_node_without_hcas_where_none_are_expected_passes():
    v = verdicts({"n1": recorded({})})["n1"]
    assert v.passed and not v.warnings
    planted = verdicts({"n1": recorded({})}, {"n1": Node(name="n1", address="a", hcas=2)})
    assert planted["n1"].failures == (
        "0 HCA(s) under /sys/class/infiniband (none), expected 2 (the inventory's hcas)",)


def test_the_inventorys_hcas_outweighs_the_majority():
    fleet = {f"n{i}": recorded({"mlx5_0": [port()]}) for i in range(3)}
    v = verdicts(fleet, {"n0": Node(name="n0", address="a", hcas=2)})
    assert [n for n, x in v.items() if not x.passed] == ["n0"]
    assert v["n0"].failures[0].endswith("expected 2 (the inventory's hcas)")


def test_the_rate_setting_outweighs_the_majority():
    fleet = {f"n{i}": recorded(two_hcas(mlx5_0=[port(rate=HDR)], mlx5_1=[port(rate=HDR)]))
             for i in range(3)}
    assert all(x.passed for x in verdicts(fleet).values())
    v = verdicts(fleet, rate_gbps=400)
    assert all(x.failures[0] == "mlx5_0 port 1: rate 200 Gb/sec (4X HDR), expected 400 "
               "Gb/sec (the rate_gbps setting)" for x in v.values())


def test_error_counter_growth_fails_past_its_bound_and_lifetime_values_warn():
    grown = port(symbol_error=250)
    grown["growth"] = {"port_rcv_errors": 3}
    v = verdicts({"n1": recorded({"mlx5_0": [grown]}, window=10.0)})["n1"]
    assert v.failures == ("mlx5_0 port 1: port_rcv_errors grew by 3 in 10 s, more than 0",)
    assert v.warnings == ("mlx5_0 port 1: symbol_error is 250 over the port's lifetime "
                          "(warned from 100)",)
    assert verdicts({"n1": recorded({"mlx5_0": [grown]})}, max_error_growth=5)["n1"].passed


def test_a_grown_link_downed_fails_whatever_the_bound():
    flapped = port()
    flapped["growth"] = {"link_downed": 1}
    v = verdicts({"n1": recorded({"mlx5_0": [flapped]})}, max_error_growth=100)["n1"]
    assert v.failures == ("mlx5_0 port 1: link_downed grew by 1 in 10 s: the port flapped",)


def nvgpu(index: int, active: int, links: int = 18, down=()) -> dict:
    return {"device": str(index), "index": index, "name": "NVIDIA H100 80GB HBM3",
            "uuid": f"GPU-{index}", "nvlink": {"links": links, "active": active,
                                               "down": list(down)}}


def test_nvlink_against_the_model_its_name_and_the_setting():
    o = recorded({}, devices=[nvgpu(0, 18), nvgpu(1, 0, links=0)])
    want = "GPU 1 (NVIDIA H100 80GB HBM3, GPU-1): 0 NVLink link(s) active of 0, expected 18"
    assert verdicts({"n": o}, gpus=2, model="H100-SXM5-80GB")["n"].failures == (want,)
    assert verdicts({"n": o}, gpus=2)["n"].failures == (want,), "model from NVML's name"
    assert verdicts({"n": o}, gpus=2, model="H100-PCIe-80GB")["n"].passed, "no NVLink model"
    assert verdicts({"n": o}, gpus=2, nvlink_links=0)["n"].passed


def test_nvlink_unreadable_on_a_model_that_has_it_fails():
    o = recorded({}, nvlink={"read": False, "why": "NVML did not initialise: Driver Not "
                                                   "Loaded"})
    v = verdicts({"n": o}, gpus=8, model="H100-SXM5-80GB")["n"]
    assert v.failures == ("NVLink not read: NVML did not initialise: Driver Not Loaded",)
    assert verdicts({"n": o}, gpus=0, model="H100-SXM5-80GB")["n"].passed, "CPU-only node"


def test_figures_carry_port_state_rate_growth_and_nvlink():
    p = port()
    p["growth"] = {"symbol_error": 2}
    figs = figures({"data": recorded({"mlx5_0": [p]}, devices=[nvgpu(0, 17)]).data})
    by = {(f.metric, dict(f.labels).get("counter")): f.value for f in figs}
    assert by[("fabric_port_active_ratio", None)] == 1.0
    assert by[("fabric_port_rate_gbps", None)] == 50.0  # 400 Gb/sec
    assert by[("fabric_port_new_errors", "symbol_error")] == 2
    assert by[("nvlink_active_ratio", None)] == 17 / 18


@pytest.mark.parametrize("value", [-1, "eight", 1.5])
def test_inventory_hcas_must_be_a_count(tmp_path, value):
    path = tmp_path / "inv.yaml"
    path.write_text(f"version: 1\nnodes:\n  - name: n1\n    hcas: {value}\n")
    with pytest.raises(InventoryError, match="an integer from 0 to 256"):
        load_inventory(path)
    path.write_text("version: 1\ndefaults: {hcas: 8}\nnodes:\n  - name: n1\n")
    assert load_inventory(path).node("n1").hcas == 8


# --- growth over the run's load: health reads the counters first, fabric after the load ---

def test_counters_grown_since_health_fail_and_the_window_is_the_runs(pytester, tmp_path):
    """In a run, fabric judges growth since the health probe read the counters (no quiet
    window of its own): a port whose errors grow all along the run fails alone."""
    trees = {name: ib_tree(tmp_path / name, two_hcas()) for name in ("clean1", "clean2", "errs")}
    nodes = "".join(f"      - name: {name}\n        checks:\n          fabric: {{sysfs_root: "
                    f"{root}}}\n" for name, root in trees.items())
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent("""\
        version: 1
        defaults: {transport: local, gpus: 0}
        checks:
          fabric: {window_s: 600, timeout_s: 60}
        nodes:
        """) + nodes)
    # The 600 s window is a tripwire: a fabric probe that did not get its baseline waits
    # it out, and its 60 s time-out fails every node at once, not three minutes later.
    stop = threading.Event()
    grower = threading.Thread(target=keep_growing, daemon=True, args=(
        trees["errs"] / "mlx5_0/ports/1/counters/port_rcv_errors", stop))
    grower.start()
    try:
        result, reports = run_suite(pytester, inv, "-k", "health or fabric")
    finally:
        stop.set()
        grower.join()
    cases = {n: c["fabric"] for n, c in junit_cases(reports).items()}
    assert cases["clean1"] == cases["clean2"] == ("passed", "")
    outcome, message = cases["errs"]
    assert outcome == "failure" and message.startswith("mlx5_0 port 1: port_rcv_errors grew by ")
    assert " since the health check " in message and message.endswith(
        " s earlier, over the run's load, more than 0")
    ib = [json.loads(ln) for ln in (reports / "latest" / "results.jsonl").open()
          if json.loads(ln)["check"] == "fabric"][0]["data"]["figures"]["ib"]
    assert ib["since"] == "baseline" and ib["window_s"] < 600, "no quiet window was waited"


def test_nvlink_counters_grown_since_health_fail_the_link(nvml, tmp_path):
    """The real health and fabric probes, the emulated GPU's link counters grown between
    them: as DCGM judges them, a retrained link and a replay fail at 1, CRC errors at
    100 per second (DcgmGPUHardwareLimits.h)."""
    from burnin.probe.protocol import run_probe
    from burnin.transports.local import LocalTransport
    repo = Path(__file__).resolve().parent.parent
    uuids = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(2)]
    node = Node(name="n1", address="n1", transport="local", gpus=2,
                gpu_model="H100-SXM5-80GB")
    settings = {"sysfs_root": str(tmp_path / "no-ib")}
    nvml(devices=[{"uuid": u, "nvlink": {"errors": {"crc_flit": {"3": 7}}}} for u in uuids])
    health = run_probe(LocalTransport(node, repo / "probes"), "health",
                       {"gpus": 2, "baselines": {"fabric": settings}}, timeout_s=300)
    assert health.ok, health.reason
    baseline = health.data["figures"]["baselines"]["fabric"]
    assert baseline["nvlink"][uuids[1]]["3"]["crc_flit"] == 7
    nvml(devices=[{"uuid": uuids[0], "nvlink": {"errors": {"crc_flit": {"3": 7}}}},
                  {"uuid": uuids[1], "nvlink": {"errors": {"crc_flit": {"3": 100007},
                                                           "replay": {"3": 5},
                                                           "recovery": {"5": 1}}}}])
    fabric = run_probe(LocalTransport(node, repo / "probes"), "fabric",
                       {"gpus": 2, "settings": settings, "baseline": baseline}, timeout_s=300)
    assert fabric.ok, fabric.reason
    v = verdicts({"n1": fabric}, gpus=2, model="H100-SXM5-80GB")["n1"]
    over = f"since the health check {fabric.data['figures']['ib']['window_s']:.0f} s " \
           "earlier, over the run's load"
    gpu1 = f"GPU 1 (NVIDIA H100 80GB HBM3, {uuids[1]})"
    crc, *others = v.failures
    assert crc.startswith(f"{gpu1} NVLink link 3: crc_flit grew by 100000 {over}: ")
    assert crc.endswith(" per second, at least 100")
    assert others == [
        f"{gpu1} NVLink link 3: replay grew by 5 {over}: the link replayed",
        f"{gpu1} NVLink link 5: recovery grew by 1 {over}: the link retrained"]
    assert v.warnings == ()
    new = {(dict(f.labels)["link"], dict(f.labels)["counter"]): f.value
           for f in figures(fabric.to_record("r", "fabric")) if f.metric == "nvlink_new_errors"}
    assert new == {("3", "crc_flit"): 100000, ("3", "replay"): 5, ("5", "recovery"): 1}


def test_a_healthy_node_with_compute_and_storage_nics_passes(tmp_path):
    """A 200G RoCE storage NIC beside 400G NDR compute HCAs: each port is held to the rate
    of its own link layer, not to the node's most common rate."""
    from burnin.probe.protocol import run_probe
    from burnin.transports.local import LocalTransport
    root = ib_tree(tmp_path / "ib", several_nics())
    node = Node(name="n", address="n", transport="local", gpus=0)
    out = run_probe(LocalTransport(node, Path(__file__).resolve().parent.parent / "probes"),
                    "fabric", {"gpus": 0, "settings": {"sysfs_root": str(root),
                                                       "window_s": 0.1}}, 120)
    assert out.ok, out.reason
    layers = {p["link_layer"] for h in out.data["figures"]["ib"]["hcas"] for p in h["ports"]}
    assert layers == {"InfiniBand", "Ethernet"}
    fleet = {f"n{i}": out for i in range(3)}
    failing = {n: v.failures for n, v in verdicts(fleet).items() if not v.passed}
    assert not failing, failing
