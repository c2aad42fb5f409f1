"""The gpupairs check's judge: the copy bandwidth of every ordered pair of a node's GPUs
(probes/gpupairs.py, copy engine, as nvbandwidth's device_to_device_memcpy_write_ce).

A pair fails below the inventory's floor (`min_pair_gbps`; the built-in table has none:
nvbandwidth publishes no floor per GPU model, and NVIDIA's NVLink figures are the link's
signalling rate, not a copy's), below a share of the median of the node's own pairs
over the same kind of link (one bad NVLink among 56 pairs of an 8-GPU node stands out
from its siblings whatever the model), or below a share of the fleet's: the median, per
model and link, of each node's median pair. Every failure names the pair, its direction
and the link NVML said it crosses. Every ordered pair must be there (fail closed), and
every copy must arrive as sent.
"""

from __future__ import annotations

import statistics

from burnin.checks.base import (
    PEER_SPREADS,
    PEERS,
    Check,
    Figure,
    Fleet,
    Judging,
    Measure,
    Setting,
    count_problem,
    peer_bound,
    peer_medians,
    timeout,
)
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import Int, List, Num, Obj, Str, document


def _key(model, link: str) -> tuple[str, str]:
    return (model.key if model is not None else "", link)


def _by_link(pairs: list[dict]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for p in pairs:
        out.setdefault(p["link"], []).append(p["gbps"])
    return out


def summarize(fleet: Fleet) -> dict:
    """{(model, link): {median, nodes, spread}}: each node one vote, its median pair."""
    votes: dict[tuple[str, str], list[float]] = {}
    for name, o in fleet.voters():
        for link, rates in _by_link(o.data["figures"].get("pairs") or []).items():
            votes.setdefault(_key(fleet.models.get(name), link), []).append(
                statistics.median(rates))
    # each node one vote: how far its figure strays from the median (the run's noise)
    return peer_medians(votes)


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "gpupairs", (outcome.reason,))
    fig, settings = outcome.data["figures"], j.settings
    failures = [f"probe error: {e}" for e in outcome.data["errors"]]
    failures += count_problem(outcome.data["devices"], j)
    labels = [d["device"] for d in outcome.data["devices"]]
    pairs = fig.get("pairs") or []
    seen = {(p["src"], p["dst"]) for p in pairs}
    missing = [f"{a} -> {b}" for a in labels for b in labels if a != b and (a, b) not in seen]
    if missing:
        failures.append(f"no copy bandwidth for {len(missing)} pair(s): "
                        f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
    floor = settings.get("min_pair_gbps")
    node_fraction = settings.get("node_fraction", 0.8)
    fleet_fraction = settings.get("peer_fraction", 0.8)
    siblings = _by_link(pairs)
    for p in pairs:
        what = f"{p['src']} -> {p['dst']} ({p['link']}): copy {p['gbps']:.3f} GB/s"
        if floor is not None and p["gbps"] < floor:
            failures.append(f"{what}, below the floor of {floor:g} GB/s")
            continue
        rates = siblings[p["link"]]
        if node_fraction and len(rates) >= PEERS:
            here = statistics.median(rates)
            if p["gbps"] < node_fraction * here:
                failures.append(f"{what}, below {node_fraction:g} x {here:.3f} GB/s, the "
                                f"median of this node's {len(rates)} pairs over that link")
                continue
        peers = (j.fleet or {}).get(_key(j.model, p["link"]), {})
        if fleet_fraction and peers.get("nodes", 0) >= PEERS:
            bound, words = peer_bound(peers["median"], peers.get("spread"), fleet_fraction,
                                      settings.get("peer_spreads", PEER_SPREADS), "GB/s")
            if p["gbps"] < bound:
                failures.append(f"{what}, below {words}, the median of the run's "
                                f"{peers['nodes']} nodes of this model over that link")
    notes = ("one GPU: no pair to measure",) if len(labels) == 1 else ()
    return Verdict(node.name, "gpupairs", tuple(failures), notes,
                   floors={} if floor is None else {"gpupairs": floor})


def figures(record: dict) -> list[Figure]:
    return [Figure(COPY.metric, (("src", p["src"]), ("dst", p["dst"]), ("link", p["link"])),
                   p["gbps"], "Copy bandwidth from one GPU to another, copy engine")
            for p in record["data"]["figures"].get("pairs") or []]


DEVICE = Obj(required=("device",), device=Str(64), name=Str(256), uuid=Str(128),
             pci_bus_id=Str(64))
PAIR = Obj(required=("src", "dst", "gbps", "link"), src=Str(64), dst=Str(64),
           bytes=Int(1), copies=Int(1), rounds=Int(1), gbps=Num(0, 1e5), link=Str(128))
SCHEMA = document(DEVICE, Obj(pairs=List(PAIR, max=64 * 63), block_bytes=Int(1),
                              why=Str(256)))

SETTINGS = {
    "timeout_s": timeout(300, 600, 1200),
    "min_pair_gbps": Setting("positive", None, "floor for every pair (GB/s, one direction); "
                             "default none: no published figure, the pairs judge each "
                             "other"),
    "node_fraction": Setting("fraction", 0.8, "fail a pair below this share of the median "
                             "of the node's pairs over the same kind of link; 0: off"),
    "peer_fraction": Setting("fraction", 0.8, "fail a pair below this share of the median "
                             "of the run's nodes of the model over that link; 0: off"),
    "peer_spreads": Setting("positive", PEER_SPREADS, "robust spreads of the run's nodes a "
                            "pair may fall below their median"),
    "block_mb": Setting("int", {"quick": 64, "standard": 256, "extended": 1024}),
    "seconds": Setting("positive", {"quick": 0.1, "standard": 0.3, "extended": 1.0},
                       "per pair and direction"),
    "rounds": Setting("int", 3, "rounds per pair and direction, the best reported"),
    "min_copies": Setting("int", 3, "copies per round"),
}

COPY = Measure("gpupair_copy_gbps", "GB/s", "GPU pair copy GB/s, slowest pair",
               "copy {src} -> {dst}")
CHECK = Check(name="gpupairs", doc="every GPU pair's link is whole", judge=judge,
              schema=SCHEMA, summarize=summarize, figures=figures, settings=SETTINGS,
              gpu_only=True, page_order=64, measures=(COPY,))
