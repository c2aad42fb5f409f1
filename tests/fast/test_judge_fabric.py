"""The fabric judge: HCA ports and NVLink (burnin/checks/fabric.py)."""

from __future__ import annotations

from support.judging import H100, failed, judge, outcome, summary

from burnin.checks.base import Judging
from burnin.checks.fabric import _links_for, _over, evidence, figures
from burnin.model.gpu_reference import GpuModel
from burnin.model.nodes import Node

NAME = "NVIDIA H100 80GB HBM3"
CPU = Node("n1", "n1", gpus=0)
GPU = Node("n1", "n1", gpus=2, gpu_model="H100")


def port(p="1", rate=400.0, layer="InfiniBand", state="ACTIVE", phys="LinkUp", **extra):
    d = {"port": p, "state": state, "phys_state": phys, "rate_gbps": rate, "link_layer": layer,
         "rate": None if rate is None else f"{rate:g} Gb/sec (4X NDR)"}
    d.update(extra)
    return d


def hca(name, *ports):
    return {"name": name, "ports": list(ports)}


def fabric(hcas=(), devices=(), nvlink=None, errors=(), node="n1", since=None, window=10.0):
    ib = {"root": "/sys/class/infiniband", "hcas": list(hcas), "window_s": window}
    if since:
        ib["since"] = since
    return outcome("fabric", list(devices), {"ib": ib, "nvlink": nvlink or {"read": False,
                                                                          "why": "no GPU"}},
                   errors, node)


NO_FLEET = {"hcas": (None, "", 0), "rate": {}}


def verdict(o, node=CPU, **kw):
    kw.setdefault("fleet", NO_FLEET)
    kw.setdefault("gpus", node.gpus)
    return judge("fabric", o, node, **kw)


def test_a_node_without_hcas_where_none_are_expected_passes():
    assert verdict(fabric()) == ((), ())
    assert verdict(fabric(), fleet=None) == ((), ())
    assert verdict(failed("fabric", "no sysfs")) == (("no sysfs",), ())
    assert verdict(fabric(errors=["sysfs: EACCES"])) == (("probe error: sysfs: EACCES",), ())


def test_hca_count_against_the_inventory_and_the_majority():
    o = fabric([hca("mlx5_0", port())])
    assert verdict(o, Node("n1", "n1", gpus=0, hcas=2))[0] == (
        "1 HCA(s) under /sys/class/infiniband (mlx5_0), expected 2 (the inventory's hcas)",)
    assert verdict(fabric(), Node("n1", "n1", gpus=0, hcas=1))[0] == (
        "0 HCA(s) under /sys/class/infiniband (none), expected 1 (the inventory's hcas)",)
    assert verdict(o, Node("n1", "n1", gpus=0, hcas=1)) == ((), ())
    fleet = {"hcas": (2, "", 3), "rate": {}}
    assert verdict(o, fleet=fleet)[0] == (
        "1 HCA(s) under /sys/class/infiniband (mlx5_0), expected 2 (most of the run's 3 "
        "nodes)",)
    assert verdict(o, fleet={"hcas": (2, "", 1), "rate": {}}) == ((), ())
    assert verdict(o, fleet={"hcas": (2, "", 2), "rate": {}})[0] == (
        "1 HCA(s) under /sys/class/infiniband (mlx5_0), expected 2 (most of the run's 2 "
        "nodes)",)
    two = fabric([hca("mlx5_0", port()), hca("mlx5_1", port())])
    assert verdict(two, Node("n1", "n1", gpus=0, hcas=3))[0] == (
        "2 HCA(s) under /sys/class/infiniband (mlx5_0, mlx5_1), expected 3 (the inventory's "
        "hcas)",)
    assert verdict(two, fleet=None) == ((), ()), "no fleet figures: judged alone"
    assert verdict(o, fleet={"hcas": (None, "no majority", 3), "rate": {}}) == ((), ())
    assert verdict(fabric(), fleet={"hcas": (0, "", 3), "rate": {}}) == ((), ())


def test_each_port_up_and_at_its_rate():
    o = fabric([hca("mlx5_0", port("1", state="DOWN", phys="Polling"), port("2", rate=200.0)),
                hca("mlx5_1")])
    assert verdict(o, settings={"rate_gbps": 400})[0] == (
        "mlx5_0 port 1: state DOWN, expected ACTIVE",
        "mlx5_0 port 1: phys_state Polling, expected LinkUp",
        "mlx5_0 port 2: rate 200 Gb/sec (4X NDR), expected 400 Gb/sec (the rate_gbps setting)",
        "mlx5_1: no port")
    nameless = port("1", rate=None)
    assert verdict(fabric([hca("mlx5_0", nameless)]), settings={"rate_gbps": 400})[0] == (
        "mlx5_0 port 1: rate None, expected 400 Gb/sec (the rate_gbps setting)",)


def test_each_link_layer_is_held_to_its_own_majority_rate():
    fleet = {"hcas": (3, "", 3), "rate": {"InfiniBand": (400.0, "", 3),
                                          "Ethernet": (200.0, "", 3), "": (100.0, "", 1)}}
    o = fabric([hca("mlx5_0", port()), hca("mlx5_1", port(rate=200.0)),
                hca("mlx5_2", port(rate=200.0, layer="Ethernet"))])
    assert verdict(o, fleet=fleet)[0] == (
        "mlx5_1 port 1: rate 200 Gb/sec (4X NDR), expected 400 Gb/sec (the InfiniBand rate of "
        "most of the run's 3 nodes)",)
    odd = fabric([hca("a", port(layer=None, rate=10.0)), hca("b", port()), hca("c", port())])
    assert verdict(odd, fleet={**fleet, "rate": {"": (100.0, "", 2)}})[0] == (
        "a port 1: rate 10 Gb/sec (4X NDR), expected 100 Gb/sec (the rate of most of the "
        "run's 2 nodes)",)
    assert verdict(odd, fleet={**fleet, "rate": {"": (None, "tie", 3)}}) == ((), ())
    lone = fabric([hca("mlx5_0", port(rate=200.0))])
    assert verdict(lone, fleet={"hcas": (1, "", 1), "rate": {"InfiniBand": (400.0, "", 1)}}) \
        == ((), ()), "one node's rate is no majority"


def test_port_counters_growing_and_flapping():
    grew = port(growth={"symbol_error": 2, "link_downed": 1, "port_rcv_errors": 0},
                before={"symbol_error": 150, "link_downed": 99})
    o = fabric([hca("mlx5_0", grew)], since="baseline", window=600.4)
    assert verdict(o) == ((
        "mlx5_0 port 1: link_downed grew by 1 since the health check 600 s earlier, over the "
        "run's load: the port flapped",
        "mlx5_0 port 1: symbol_error grew by 2 since the health check 600 s earlier, over the "
        "run's load, more than 0"),
        ("mlx5_0 port 1: symbol_error is 150 over the port's lifetime (warned from 100)",))
    assert verdict(fabric([hca("mlx5_0", grew)], window=2.5),
                   settings={"max_error_growth": 2, "lifetime_warn": 0}) == ((
        "mlx5_0 port 1: link_downed grew by 1 in 2.5 s: the port flapped",), ())
    assert verdict(fabric([hca("mlx5_0", grew)]), drop=("max_error_growth", "lifetime_warn"))[
        0][1].endswith("more than 0"), "0 by default"
    assert verdict(fabric([hca("mlx5_0", grew)]), drop=("lifetime_warn",))[1] == (
        "mlx5_0 port 1: symbol_error is 150 over the port's lifetime (warned from 100)",)
    assert verdict(fabric([hca("mlx5_0", port(growth={"link_downed": 0},
                                              before={"x": 100}))]),
                   settings={"lifetime_warn": 101}) == ((), ())
    at = fabric([hca("mlx5_0", port(before={"x": 100}), port("2", before={"y": 200}))])
    assert verdict(at, settings={"lifetime_warn": 100})[1] == (
        "mlx5_0 port 1: x is 100 over the port's lifetime (warned from 100)",
        "mlx5_0 port 2: y is 200 over the port's lifetime (warned from 100)")


def test_over_says_the_window():
    assert _over({"since": "baseline", "window_s": 12.6}) == \
        "since the health check 13 s earlier, over the run's load"
    assert _over({"window_s": 10.0}) == "in 10 s"


def gpu(i, active=18, links=18, down=(), growth=None, name=NAME, **extra):
    nv = {"links": links, "active": active, "down": list(down)}
    if growth is not None:
        nv["growth"] = growth
    return {"device": f"cuda:{i}", "index": i, "name": name, "uuid": f"GPU-{i}",
            "nvlink": nv, **extra}


def test_nvlink_links_active_per_gpu():
    o = fabric(devices=[gpu(0), gpu(1, active=16, down=(3, 7))], nvlink={"read": True})
    assert verdict(o, GPU, model=H100, devices=2) == ((
        "GPU cuda:1 (NVIDIA H100 80GB HBM3, GPU-1): 16 NVLink link(s) active of 18, expected "
        "18 (down: link 3, 7)",), ())
    assert verdict(o, GPU, model=H100, devices=2, settings={"nvlink_links": 16}) == ((), ())
    assert verdict(o, GPU, model=None, devices=2)[0] != (), "the built-in model NVML names"
    no_links = fabric(devices=[gpu(0, active=0, links=0)], nvlink={"read": True})
    assert verdict(no_links, GPU, model=H100, devices=1)[0] == (
        "GPU cuda:0 (NVIDIA H100 80GB HBM3, GPU-0): 0 NVLink link(s) active of 0, expected 18",)
    bare = fabric(devices=[{"device": "cuda:0", "name": NAME}], nvlink={"read": True})
    assert verdict(bare, GPU, model=H100, devices=1)[0] == (
        "GPU cuda:0 (NVIDIA H100 80GB HBM3): 0 NVLink link(s) active of 0, expected 18",)
    lost = fabric(devices=[gpu(0, active=0, error="GPU is lost")], nvlink={"read": True})
    assert verdict(lost, GPU, model=H100, devices=1) == ((), ())
    then = fabric(devices=[gpu(0, active=0, error="GPU is lost"), gpu(1, active=2)],
                  nvlink={"read": True})
    assert verdict(then, GPU, model=H100, devices=2)[0] == (
        "GPU cuda:1 (NVIDIA H100 80GB HBM3, GPU-1): 2 NVLink link(s) active of 18, expected "
        "18",)
    unknown = fabric(devices=[gpu(0, active=0, name="Mystery GPU")], nvlink={"read": True})
    assert verdict(unknown, GPU, model=None, devices=1) == ((), ())
    assert verdict(o, GPU, model=H100, devices=3)[0][0] == (
        "the probe reported 2 device(s), expected 3 (the inventory's count, or what the "
        "node's health facts showed)")


def test_nvlink_not_read_fails_only_where_links_are_expected():
    o = fabric(nvlink={"read": False, "why": "NVML has no NVLink"})
    assert verdict(o, GPU, model=H100) == (("NVLink not read: NVML has no NVLink",), ())
    assert verdict(o, GPU, model=GpuModel("L4", ("NVIDIA L4",))) == ((), ())
    assert verdict(o, GPU, model=None) == ((), ())
    assert verdict(o, CPU, model=H100) == ((), ()), "a CPU node has no NVLink"


def test_links_for():
    j = Judging(settings={}, model=None)
    assert _links_for(j, NAME) == 18 and _links_for(j, "Mystery") is None
    assert _links_for(j, None) is None and _links_for(j, "") is None
    assert _links_for(Judging(settings={"nvlink_links": 4}, model=H100), NAME) == 4
    assert _links_for(Judging(settings={"nvlink_links": 0}, model=H100), NAME) == 0
    assert _links_for(Judging(settings={}, model=GpuModel("X", ())), NAME) is None


def test_nvlink_counters_growing_before_nvlink5_as_dcgm_judges_them():
    """DcgmHealthWatch.cpp MonitorNVLink: replay and recovery fail at 1; CRC errors fail
    at 100 per second (DcgmGPUHardwareLimits.h DCGM_LIMIT_MAX_NVLINK_CRC_ERROR)."""
    at = "GPU cuda:0 (NVIDIA H100 80GB HBM3, GPU-0) NVLink link"
    growth = {"10": {"replay": 1, "crc_flit": 0}, "2": {"recovery": 1, "crc_data": 5}}
    o = fabric(devices=[gpu(0, growth=growth)], nvlink={"read": True}, window=3.0)
    assert verdict(o, GPU, model=H100, devices=1) == ((
        f"{at} 2: recovery grew by 1 in 3 s: the link retrained",
        f"{at} 10: replay grew by 1 in 3 s: the link replayed"),
        (f"{at} 2: crc_data grew by 5 in 3 s",))
    fast = fabric(devices=[gpu(0, growth={"4": {"crc_flit": 300}})], nvlink={"read": True},
                  window=3.0)
    assert verdict(fast, GPU, model=H100, devices=1)[0] == (
        f"{at} 4: crc_flit grew by 300 in 3 s: 100 per second, at least 100",)
    assert verdict(fast, GPU, model=H100, devices=1,
                   settings={"max_nvlink_crc_per_s": 101}) == ((), (
                       f"{at} 4: crc_flit grew by 300 in 3 s",))
    slow = fabric(devices=[gpu(0, growth={"4": {"crc_flit": 299}})], nvlink={"read": True},
                  window=3.0)
    assert verdict(slow, GPU, model=H100, devices=1)[0] == ()
    quiet = fabric(devices=[gpu(0, growth={"0": {"recovery": 0, "replay": 0}})],
                   nvlink={"read": True})
    assert verdict(quiet, GPU, model=H100, devices=1) == ((), ())


def test_the_fleet_majorities():
    def node(name, *hcas):
        return fabric(list(hcas), node=name)
    outcomes = {
        "n1": node("n1", hca("a", port("3", rate=200.0), port(), port("2")),
                   hca("e", port(rate=100.0, layer="Ethernet"), port("2", rate=50.0,
                                                                     layer=None))),
        "n2": node("n2", hca("a", port()), hca("b", port(rate=None))),
        "n3": node("n3", hca("a", port(rate=200.0)), hca("b", port(rate=200.0)),
                   hca("c", port(rate=400.0))),
        "n4": failed("fabric", "x", "n4"),
    }
    assert summary("fabric", outcomes) == {
        "hcas": (2, "", 3),
        "rate": {"InfiniBand": (400.0, "", 3), "Ethernet": (100.0, "", 1),
                 "": (50.0, "", 1)}}
    assert summary("fabric", {}) == {"hcas": (None, "no node reported a value", 0),
                                     "rate": {}}


def test_a_nodes_rate_is_the_one_most_of_its_ports_run_at_whatever_their_order():
    def node(name, *rates):
        return fabric([hca("a", *(port(str(i), rate=r) for i, r in enumerate(rates)))],
                      node=name)
    outcomes = {"n1": node("n1", 400.0, 200.0, 200.0), "n2": node("n2", 200.0, 200.0, 400.0),
                "n3": node("n3", 400.0)}
    assert summary("fabric", outcomes)["rate"] == {"InfiniBand": (200.0, "", 3)}


def test_figures_and_evidence():
    p = port(growth={"symbol_error": 3})
    p2 = port("2", state="DOWN", rate_gbps=None)
    rec = {"data": {"figures": {"ib": {"hcas": [hca("mlx5_0", p, p2)]},
                                "nvlink": {"read": True}},
                    "devices": [gpu(0, active=9, links=18, growth={"1": {"replay": 2}}),
                                gpu(1, links=0, active=0)]}}
    got = [(f.metric, f.labels, f.value) for f in figures(rec)]
    lab, lab2 = (("hca", "mlx5_0"), ("port", "1")), (("hca", "mlx5_0"), ("port", "2"))
    assert got == [
        ("fabric_port_active_ratio", lab, 1.0), ("fabric_port_rate_gbps", lab, 50.0),
        ("fabric_port_new_errors", (*lab, ("counter", "symbol_error")), 3),
        ("fabric_port_active_ratio", lab2, 0.0),
        ("nvlink_active_ratio", (("device", "cuda:0"),), 0.5),
        ("nvlink_new_errors", (("device", "cuda:0"), ("link", "1"), ("counter", "replay")), 2)]
    helps = [f.help for f in figures(rec)]
    assert helps == ["1 when the HCA port is ACTIVE, else 0",
                     "the port's link rate, GB/s (its Gb/sec over 8)",
                     "error counter growth over the probe's window",
                     "1 when the HCA port is ACTIVE, else 0",
                     "share of the GPU's NVLink links that are active",
                     "NVLink error counter growth over the run"]
    assert evidence(rec) == {"fabric.json": {"ib": rec["data"]["figures"]["ib"],
                                             "nvlink": {"read": True},
                                             "devices": rec["data"]["devices"]}}
