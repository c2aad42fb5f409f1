"""The pcie check's judge: every GPU can be fed from the host. Host-to-device,
device-to-host and both at once (bidirectional: both directions' bytes summed; its floor
is the model's pcie_bidir_gbps or min_bidir_gbps, where none the peers' rules alone) GB/s
per GPU against the model's floor, the same model's fleet median
(each node one vote) and the node's own GPUs; all GPUs at once against the node's own
GPUs (a GPU that falls behind only when its neighbours copy shares a switch or sits on
the wrong NUMA node) and the node's aggregate against a floor and the fleet's nodes of
the same model and GPU count. Each message gives the link's width and generation, and
the NUMA node and CPUs the GPU's copy worker ran on (or that it ran unbound)."""

from __future__ import annotations

import statistics

from burnin.checks.base import (
    DEVICE_COUNT,
    PEER_SPREADS,
    PEERS,
    Check,
    Figure,
    Fleet,
    Judging,
    Measure,
    Setting,
    count_problem,
    node_spread,
    peer_bound,
    timeout,
)
from burnin.checks.base import device_name as where
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, Bool, Int, List, Num, Obj, Str, document

DIRECTIONS = {"h2d": "host-to-device", "d2h": "device-to-host",
              "bidir": "bidirectional (host-to-device and device-to-host at once)"}
# What a document from before the bidirectional round measured (burnin rejudge of it).
OLD_DIRECTIONS = ("h2d", "d2h")


def _rates(devices: list[dict], direction: str, concurrent: bool = False) -> list[float]:
    """The devices' figures in `direction` (the callers leave out devices in error)."""
    out = []
    for d in devices:
        m = (d.get("concurrent") or {}).get(direction) if concurrent else d.get(direction)
        if m:
            out.append(m["gbps"])
    return out


def fleet_summary(fleet: Fleet) -> dict:
    """Once per run: per GPU model, the median over nodes of each node's median GB/s per
    direction; per (model, GPU count), the median all-at-once aggregate. Each node one
    vote, and only nodes that reported every GPU they have."""
    per_model: dict[str, dict[str, list[list[float]]]] = {}  # each node's list of rates
    per_node_kind: dict[tuple, dict[str, list[float]]] = {}
    for _, o in fleet.voters():
        devices = [d for d in o.data["devices"] if "error" not in d]
        models = {d.get("name") for d in devices}
        for model in models:
            mine = [d for d in devices if d.get("name") == model]
            for direction in DIRECTIONS:
                rates = _rates(mine, direction)
                if rates:
                    per_model.setdefault(model, {}).setdefault(direction, []).append(rates)
        if len(models) == 1:
            kind = (models.pop(), len(devices))
            for direction in DIRECTIONS:
                agg = (o.data["figures"].get("aggregate") or {}).get(direction)
                if agg:
                    per_node_kind.setdefault(kind, {}).setdefault(direction, []).append(
                        agg["gbps"])
    medians = {m: {k: statistics.median(statistics.median(r) for r in v) for k, v in d.items()}
               for m, d in per_model.items()}
    return {"gpu": {m: {k: (medians[m][k], len(v)) for k, v in d.items()}
                    for m, d in per_model.items()},
            # the run's noise per model and direction, each node one vote: about the
            # fleet's median, and about the node's own median GPU
            "spread": {m: {k: (node_spread(v, medians[m][k]),
                               node_spread([r for r in v if len(r) > 1]))
                           for k, v in d.items()} for m, d in per_model.items()},
            "aggregate": {k: {x: (statistics.median(v), len(v)) for x, v in d.items()}
                          for k, d in per_node_kind.items()}}


def link(dev: dict) -> str:
    """' (link x8 Gen4, max x16 Gen5) (NUMA node 1, CPUs 56-111)': the link as NVML
    reported it under load, and where the copy worker ran; '' when neither is known."""
    ln = dev.get("link") or {}
    out = ""
    if ln.get("width") is not None or ln.get("gen") is not None:
        now = f"x{ln.get('width', '?')} Gen{ln.get('gen', '?')}"
        top = f"x{ln.get('max_width', '?')} Gen{ln.get('max_gen', '?')}"
        out = f" (link {now}" + (f", max {top})" if top != now else ")")
    placed = placement(dev)
    return f"{out} ({placed})" if placed else out


def placement(dev: dict) -> str:
    """'NUMA node 1, CPUs 56-111' where the worker was bound; why it was not, else ''.
    A cross-socket copy is slower: the reader of a slow figure needs to know where it ran."""
    aff = dev.get("affinity")
    if not aff:
        return ""
    node = "NUMA node ?" if aff.get("numa_node") is None else f"NUMA node {aff['numa_node']}"
    if aff.get("bound"):
        return f"{node}, CPUs {aff.get('cpus')}"
    return f"copies not bound to the GPU's CPUs: {aff.get('why')}"


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "pcie", (outcome.reason,))
    data, settings = outcome.data, j.settings
    failures = [f"probe error: {e}" for e in data["errors"]]
    failures += count_problem(data["devices"], j)
    if not data["devices"] and not failures:
        failures.append("no GPU was measured")
    devices = [d for d in data["devices"] if "error" not in d]
    one_way = settings.get("min_gbps") or (j.model.pcie_gbps if j.model else None)
    both_ways = settings.get("min_bidir_gbps") or (j.model.pcie_bidir_gbps if j.model else None)
    fraction = settings.get("peer_fraction", 0.8)
    spreads = settings.get("peer_spreads", PEER_SPREADS)
    summary = j.fleet or {"gpu": {}, "aggregate": {}}
    measured = data["figures"].get("directions") or OLD_DIRECTIONS
    for direction, words in DIRECTIONS.items():
        if direction not in measured:
            continue
        floor = both_ways if direction == "bidir" else one_way
        node_median = _median(_rates(devices, direction))
        together = _median(_rates(devices, direction, concurrent=True))
        for dev in devices:
            m = dev.get(direction)
            if not m:
                failures.append(f"{where(dev)}: no {words} figure")
                continue
            rate, at = m["gbps"], f"{where(dev)}: {words} {m['gbps']:.3f} GB/s"
            fleet, nodes = summary["gpu"].get(dev.get("name"), {}).get(direction, (None, 0))
            spread, within = summary.get("spread", {}).get(dev.get("name"), {}).get(
                direction, (None, None))
            if floor is not None and rate < floor:
                failures.append(f"{at}, below the floor of {floor:g} GB/s"
                                f"{_summed(direction)}{link(dev)}")
            elif fraction and nodes >= PEERS and rate < (
                    b := peer_bound(fleet, spread, fraction, spreads, "GB/s"))[0]:
                failures.append(f"{at}, below {b[1]}, the median of the run's {nodes} nodes "
                                f"with this model{link(dev)}")
            elif fraction and len(devices) >= 2 and rate < (
                    b := peer_bound(node_median, within, fraction, spreads, "GB/s"))[0]:
                failures.append(f"{at}, below {b[1]}, the median of the node's "
                                f"{len(devices)} GPUs{link(dev)}")
            c = (dev.get("concurrent") or {}).get(direction)
            if c and fraction and len(devices) >= 2 and c["gbps"] < fraction * together:
                failures.append(f"{where(dev)}: {words} {c['gbps']:.3f} GB/s with all GPUs "
                                f"copying at once, below {fraction:g} x {together:.3f} GB/s, "
                                f"the node's median GPU then{link(dev)}")
        failures += _aggregate_rules(data, direction, devices, settings, summary, fraction)
    held_to = {"pcie": one_way, "pcie bidirectional": both_ways,
               "pcie aggregate": settings.get("min_aggregate_gbps")}
    # Verdict leaves out a floor that is None; so does this, for its type.
    floors: dict[str, float] = {k: v for k, v in held_to.items() if v is not None}
    return Verdict(node.name, "pcie", tuple(failures), floors=floors)


def _summed(direction: str) -> str:
    """How a bidirectional figure and its floor read: both directions summed, where
    nvbandwidth's CE bidirectional tests report the measured stream only (its README.md:
    "CE bidir. bandwidth = (size of data on measured stream) / (time on measured
    stream)"), so a floor read off nvbandwidth is twice its figure."""
    return " (both directions summed: twice nvbandwidth's bidirectional figure)" \
        if direction == "bidir" else ""


def _aggregate_rules(data: dict, direction: str, devices: list[dict], settings: dict,
                     summary: dict, fraction: float) -> list[str]:
    agg = (data["figures"].get("aggregate") or {}).get(direction)
    if not agg:
        return []
    words = DIRECTIONS[direction]
    at = f"all {agg['gpus']} GPUs at once: {words} {agg['gbps']:.3f} GB/s in aggregate"
    # min_aggregate_gbps is one direction's: the bidirectional total has the peers alone.
    floor = settings.get("min_aggregate_gbps") if direction != "bidir" else None
    if floor is not None and agg["gbps"] < floor:
        return [f"{at}, below the floor of {floor:g} GB/s"]
    models = {d.get("name") for d in devices}
    if len(models) == 1:
        key = (models.pop(), len(devices))
        fleet, nodes = summary["aggregate"].get(key, {}).get(direction, (None, 0))
        if fraction and nodes >= PEERS and agg["gbps"] < fraction * fleet:
            return [f"{at}, below {fraction:g} x {fleet:.3f} GB/s, the median of the run's "
                    f"{nodes} nodes with {key[1]} GPUs of this model"]
    return []


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def figures(record: dict) -> list[Figure]:
    out = []
    for dev in record["data"]["devices"]:
        labels = (("device", str(dev.get("device"))),)  # metrics.prom adds the UUID
        for direction in DIRECTIONS:
            for mode, m in (("single", dev.get(direction)),
                            ("concurrent", (dev.get("concurrent") or {}).get(direction))):
                if m:
                    out.append(Figure("pcie_gbps",
                                      (*labels, ("direction", direction), ("mode", mode)),
                                      m["gbps"], "Host-GPU copy rate, one GPU at a time "
                                      "(single) or all at once (concurrent)"))
        for what in ("width", "gen"):
            value = (dev.get("link") or {}).get(what)
            if value is not None:
                name = "pcie_link_width_lanes" if what == "width" else "pcie_link_generation"
                out.append(Figure(name, labels, value,
                                  f"PCIe link {what} under load, as NVML reports it"))
    for direction, agg in (record["data"]["figures"].get("aggregate") or {}).items():
        if agg:
            out.append(Figure("pcie_aggregate_gbps", (("direction", direction),),
                              agg["gbps"], "All GPUs copying at once: node total"))
    return out


def evidence(record: dict) -> dict[str, object]:
    return {"pcie.json": {
        "aggregate": record["data"]["figures"].get("aggregate"),
        "devices": {str(d.get("device")): {k: d.get(k) for k in (
            "uuid", "pci_bus_id", "link", "affinity", "h2d", "d2h", "bidir", "concurrent",
            "pinned",
            "error")}
            for d in record["data"]["devices"]}}}


RATE = Obj(required=("gbps",), bytes=COUNT, copies=COUNT, seconds=Num(0),
           gbps=Num(0, 1e4), stream_gbps=Num(0, 1e4), null=True)
LINK = Obj(gen=Int(0, 64, null=True), width=Int(0, 64, null=True),
           max_gen=Int(0, 64, null=True), max_width=Int(0, 64, null=True), null=True)
AFFINITY = Obj(required=("bound",), bound=Bool(), numa_node=Int(0, 1 << 16, null=True),
               cpus=Str(4096, null=True), local_cpus=Str(4096, null=True),
               source=Str(64, null=True), why=Str(4096, null=True))
DEVICE = Obj(device=Str(64), name=Str(256, null=True), uuid=Str(256, null=True),
             pci_bus_id=Str(64, null=True), error=Str(4096), h2d=RATE, d2h=RATE, bidir=RATE,
             concurrent=Obj(h2d=RATE, d2h=RATE, bidir=RATE), link=LINK, affinity=AFFINITY,
             pinned=Bool(), block_bytes=COUNT, rounds=Obj(values=List(Num(0, 1e4), max=1000)))
AGGREGATE = Obj(required=("gbps", "gpus"), bytes=COUNT, seconds=Num(0),
                gbps=Num(0, 1e5), gpus=Int(1, 1024), null=True)
SCHEMA = document(DEVICE, Obj(aggregate=Obj(h2d=AGGREGATE, d2h=AGGREGATE, bidir=AGGREGATE,
                                            null=True),
                              directions=List(Str(16), max=8), gpus=COUNT, applies=Bool()))

COPY_GBPS = Measure("pcie_gbps", "GB/s", "PCIe {direction} GB/s {mode}, slowest GPU",
                    "PCIe {direction} {mode} {device}", speed=True)
CHECK = Check(
    name="pcie", page_order=40, measures=(COPY_GBPS,),
    doc="every GPU can be fed from the host", judge=judge, schema=SCHEMA,
    summarize=fleet_summary, figures=figures, evidence=evidence, gpu_only=True,
    failure_kinds=(DEVICE_COUNT,), settings={
        "timeout_s": timeout(300, 600, 900),
        "block_mb": Setting("int", 256, "bytes per copy, pinned on the host"),
        "seconds": Setting("positive", {"quick": 1, "standard": 2, "extended": 5},
                           "per GPU and direction alone (split over rounds), and per "
                           "direction all at once"),
        "rounds": Setting("int", 3, "turns of one-GPU-at-a-time copies; the best counts"),
        "min_copies": Setting("int", 3, "copies timed per figure at the least"),
        "sysfs_root": Setting("str", "/sys", "where a GPU's local CPUs are read when NVML "
                              "cannot say"),
        "min_gbps": Setting("positive", None,
                            "per GPU and direction; default: the gpu_model's pcie_gbps"),
        "min_bidir_gbps": Setting("positive", None,
                                  "per GPU, both directions at once (their sum: twice "
                                  "nvbandwidth's bidirectional figure); default: the "
                                  "gpu_model's pcie_bidir_gbps"),
        "min_aggregate_gbps": Setting("positive", None,
                                      "floor of the node's all-GPUs-at-once total"),
        "peer_fraction": Setting("fraction", 0.8,
                                 "fail below this share of the fleet's or the node's median "
                                 "(lower where the run's GPUs spread wider); 0 turns it off"),
        "peer_spreads": Setting("positive", PEER_SPREADS,
                                "robust spreads of the run's own GPUs a GPU may fall below "
                                "the median"),
    })
