"""The hca check's judge: each HCA port on its own (probes/hca.py), where perftest is
installed: its loopback RDMA write bandwidth (ib_write_bw against itself) against the
port's own rate as the kernel reports it (sysfs `ports/<n>/rate`), and its loopback write
latency (ib_write_lat) against a bound. One bad port or cable hides inside a multi-rail
all-reduce, which the ports share; alone, a port at half its rate is plain.

Bandwidth is in Gb/s as perftest reports it with --report_gbits (bits, decimal), the
unit of the port's rate. A port's loopback write moves its data through the HCA and host
memory once each way, so a healthy port comes within a few per cent of its rate (392.34
Gb/s between two 400 Gb/s NDR ports, tests/fixtures/perftest/); the default share, 0.85, leaves
room for a one-QP run's overheads. A figure above the rate is no measurement.

The check applies only to GPU nodes whose facts found ib_write_bw (Check.tool, as dcgm
with dcgmi: the run learns a tool from the facts of GPU nodes only): elsewhere it is not
collected and admission does not require it; a node with perftest but no RDMA device
passes, saying so. A port that is not ACTIVE is not measured here (the fabric check
fails it), and is named in a warning.
"""

from __future__ import annotations

from burnin.checks.base import Check, Figure, Judging, Measure, Setting, timeout
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import Bool, Int, Num, Obj, Str, document

PLAUSIBLE = 1.05  # a loopback write faster than this share of the rate is no measurement


def _name(p: dict) -> str:
    return f"{p['hca']} port {p['port']} ({p.get('rate') or 'rate unknown'})"


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "hca", (outcome.reason,))
    fig, settings = outcome.data["figures"], j.settings
    failures = [f"probe error: {e}" for e in outcome.data["errors"]]
    warnings: list[str] = []
    if not fig.get("applies"):
        return Verdict(node.name, "hca", tuple(failures), (fig.get("why") or
                                                             "not applicable",))
    share = float(settings.get("min_rate_fraction", 0.85))
    bound = settings.get("max_latency_us")
    for p in outcome.data["devices"]:
        name = _name(p)
        if p.get("skipped"):
            warnings.append(f"{name}: not measured: {p['skipped']}")
            continue
        if p.get("error"):
            failures.append(f"{name}: {p['error']}")
            continue
        bw, rate = p.get("bw_gbps"), p.get("rate_gbps")
        if bw is None:
            failures.append(f"{name}: no loopback write bandwidth reported")
        elif not rate:
            failures.append(f"{name}: loopback write {bw:g} Gb/s, but the port's rate is "
                            "unknown, so it cannot be judged")
        elif bw > PLAUSIBLE * rate:
            failures.append(f"{name}: loopback write {bw:g} Gb/s is beyond the port's rate "
                            f"of {rate:g} Gb/s: implausible")
        elif bw < share * rate:
            failures.append(f"{name}: loopback write {bw:g} Gb/s, below {share:g} x "
                            f"{rate:g} Gb/s, the port's rate")
        lat = p.get("lat_typical_us")
        if lat is None:
            warnings.append(f"{name}: latency not measured (ib_write_lat not found)")
        elif bound is not None and lat > bound:
            failures.append(f"{name}: loopback write latency {lat:g} us (typical), above "
                            f"the bound of {bound:g} us")
    return Verdict(node.name, "hca", tuple(failures), tuple(warnings))


def figures(record: dict) -> list[Figure]:
    out = []
    for p in record["data"]["devices"]:
        labels = (("hca", p["hca"]), ("port", str(p["port"])))
        if p.get("bw_gbps") is not None:
            out.append(Figure(BW.metric, labels, p["bw_gbps"] / 8,
                              "HCA port's loopback RDMA write bandwidth (ib_write_bw)"))
        if p.get("lat_typical_us") is not None:
            out.append(Figure(LAT.metric, labels, p["lat_typical_us"] / 1e6,
                              "HCA port's loopback RDMA write latency, typical "
                              "(ib_write_lat)", better="lower"))
    return out


def evidence(record: dict) -> dict[str, object]:
    return {"hca.json": record["data"]["devices"]}


PORT = Obj(required=("hca", "port"), hca=Str(128), port=Int(0, 255), state=Str(64),
           rate=Str(128), rate_gbps=Num(0, 1e5, null=True), link_layer=Str(64),
           skipped=Str(256), error=Str(1024), bytes=Int(0), iterations=Int(0),
           peak_gbps=Num(0, 1e5), bw_gbps=Num(0, 1e5), lat_bytes=Int(0),
           lat_min_us=Num(0), lat_max_us=Num(0), lat_typical_us=Num(0), lat_avg_us=Num(0),
           lat_p999_us=Num(0))
SCHEMA = document(PORT, Obj(required=("applies",), applies=Bool(), why=Str(256),
                            ib_write_bw=Str(4096), ib_write_lat=Str(4096, null=True)))

CHECK = Check(
    name="hca", doc="every HCA port is whole on its own, where perftest is installed",
    judge=judge, schema=SCHEMA, figures=figures, evidence=evidence, page_order=95,
    tool=lambda settings: settings["ib_write_bw"], gpu_only=True,
    measures=(
        Measure("hca_write_bw_gbps", "GB/s", "HCA loopback write GB/s, slowest port",
                "write {hca}/{port}", speed=False),
        Measure("hca_write_latency_seconds", "s", "HCA loopback write latency, worst port",
                "latency {hca}/{port}", worst="high"),
    ),
    settings={
        "timeout_s": timeout(300, 600, 1200),
        "ib_write_bw": Setting("str", "ib_write_bw", "perftest's ib_write_bw: a name on "
                               "PATH or a path"),
        "ib_write_lat": Setting("str", "ib_write_lat", "perftest's ib_write_lat"),
        "sysfs_root": Setting("str", "/sys/class/infiniband", "where the HCAs are listed"),
        "seconds": Setting("positive", {"quick": 2, "standard": 5, "extended": 10},
                           "ib_write_bw -D, per port"),
        "size": Setting("int", 65536, "bytes per write (ib_write_bw -s)"),
        "lat_iters": Setting("int", 1000, "ib_write_lat -n"),
        "tcp_port": Setting("int", 18515, "the TCP port perftest's server and client meet "
                            "on"),
        "min_rate_fraction": Setting("fraction", 0.85, "fail a port whose loopback write "
                                     "bandwidth is below this share of its rate"),
        "max_latency_us": Setting("positive", 5.0, "fail a port whose typical loopback "
                                  "write latency is above this"),
    })
BW, LAT = CHECK.measures
