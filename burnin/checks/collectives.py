"""The collectives check's judge: all-gather, reduce-scatter, all-to-all and send/recv
inside a node (probes/collectives.py), each by its best busbw of the sweep, with
nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md: (n-1)/n for the first three, 1 for
send/recv), so that one figure compares across rank counts as all-reduce's does.

Floors: an inventory's `min_<op>_gbps`. Neither NVIDIA nor nccl-tests publishes a floor
per GPU model for these operations (NVIDIA's published NCCL figures are all-reduce's), so
the built-in table has none and a node is judged against its peers: the median of the
run's nodes of the same model and rank count, per operation, as all-reduce's intra-node
rule (burnin/checks/allreduce.py) judges busbw. Every operation must have been measured,
and every result must be exact: a missing sweep or a wrong element fails the node.
"""

from __future__ import annotations

from burnin.checks.allreduce import PEER_FRACTION as ALLREDUCE_FRACTION
from burnin.checks.allreduce import judged
from burnin.checks.base import (
    PEER_SPREADS,
    PEERS,
    Check,
    Figure,
    Fleet,
    Judging,
    Measure,
    Setting,
    peer_bound,
    peer_medians,
    timeout,
)
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, Bool, Int, List, Num, Obj, Str, document

# peer_fraction when the inventory gives none: all-reduce's on GPU nodes. On CPU nodes
# none: gloo over cores the node's other work shares is no yardstick between nodes (an
# inventory that wants it sets peer_fraction).
PEER_FRACTION = ALLREDUCE_FRACTION["gpu"]
OPS = ("all_gather", "reduce_scatter", "all_to_all", "send_recv")
WORDS = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
         "all_to_all": "all-to-all", "send_recv": "send/recv"}


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):g} MiB"


def _peer_key(model, world, op: str) -> tuple[str, int, str]:
    return (model.key if model is not None else "", int(world or 0), op)


def summarize(fleet: Fleet) -> dict:
    """{(model, world, op): {median, nodes, spread}} over the nodes that reported it, one
    vote a node. A voter ran one rank per device, or (one device: a CPU node's `ranks`)
    several: Fleet.voters' count of devices against ranks would leave out every CPU node
    of one device."""
    rates: dict[tuple[str, int, str], list[float]] = {}
    for name, o in fleet.outcomes.items():
        fig = o.data["figures"] if o.ok else {}
        want = fleet.devices.get(name)
        if not o.ok or o.data["errors"] or want not in (None, 1, fig.get("world")):
            continue
        for op, sweep in (fig.get("ops") or {}).items():
            top = judged(sweep)
            if top is not None:
                rates.setdefault(_peer_key(fleet.models.get(name), fig.get("world"), op),
                                 []).append(top["busbw_gbps"])
    # each node one vote: how far its figure strays from the median (the run's noise)
    return peer_medians(rates)


def _expected_world(j: Judging) -> int | None:
    """One rank per GPU; on a CPU node one per CPU device, or `ranks` with a single one."""
    if j.devices is None:
        return None
    return j.devices if j.gpus or j.devices > 1 else int(j.settings.get("ranks", 2))


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "collectives", (outcome.reason,))
    fig, settings = outcome.data["figures"], j.settings
    failures = [f"probe error: {e}" for e in outcome.data["errors"]]
    world, want = fig.get("world", 0), _expected_world(j)
    if want is not None and world != want:
        failures.append(f"the probe ran {world} rank(s), expected {want} (one per device)")
    ops = fig.get("ops") or {}
    fraction = settings.get("peer_fraction")
    if fraction is None:
        fraction = PEER_FRACTION if j.gpus != 0 else 0.0
    floors = {}
    for op in OPS:
        sweep = ops.get(op) or []
        for size in sweep:
            if size["wrong_elements"]:
                failures.append(f"{size['wrong_elements']} wrong elements in the {WORDS[op]} "
                                f"result at {_mib(size['bytes'])}, expected exact values")
        top = judged(sweep)
        if top is None:
            failures.append(f"no {WORDS[op]} sweep was reported")
            continue
        if world < 2:
            continue
        busbw = top["busbw_gbps"]
        what = (f"{WORDS[op]} busbw {busbw:.3f} GB/s at {_mib(top['bytes'])}, the best of "
                f"the sweep ({world} ranks)")
        floor = settings.get(f"min_{op}_gbps")
        if floor is not None:
            floors[f"collectives {op}"] = floor
            if busbw < floor:
                failures.append(f"{what}, below the floor of {floor:g} GB/s")
        peers = (j.fleet or {}).get(_peer_key(j.model, world, op), {})
        if peers.get("nodes", 0) >= PEERS:
            bound, words = peer_bound(peers["median"], peers.get("spread"), fraction,
                                      settings.get("peer_spreads", PEER_SPREADS), "GB/s")
            if busbw < bound:
                failures.append(f"{what}, below {words}, the median of the run's "
                                f"{peers['nodes']} nodes of this model and rank count")
    notes = ("one rank: busbw is 0 by definition; nothing to judge",) if world < 2 else ()
    return Verdict(node.name, "collectives", tuple(failures), notes, floors=floors)


def figures(record: dict) -> list[Figure]:
    out = []
    for op, sweep in (record["data"]["figures"].get("ops") or {}).items():
        top = judged(sweep)
        if top is None or op not in OPS:
            continue
        # Labelled by the sweep's largest size, which the settings fix (allreduce.figures).
        out.append(Figure(BUSBW.metric, (("op", op),
                                         ("bytes", str(max(s["bytes"] for s in sweep)))),
                          top["busbw_gbps"], "Collective bus bandwidth (nccl-tests' "
                          "formula), the best of the sweep up to `bytes`"))
    return out


SIZE = Obj(bytes=Int(1), iters=Int(1), time_us=Num(0), algbw_gbps=Num(0, 1e5),
           busbw_gbps=Num(0, 1e5), wrong_elements=COUNT,
           required=("bytes", "busbw_gbps", "wrong_elements"))
RANK = Obj(rank=Int(0, 1 << 20), host=Str(256), device=Str(64), wrong_elements=COUNT)
SCHEMA = document(RANK, Obj(
    world=Int(0, 1 << 20), ranks_here=Int(0, 1024), first_rank=Int(0, 1 << 20),
    mode=Str(64), unable=Bool(), backend=Str(64),
    ops=Obj(all_gather=List(SIZE, max=64), reduce_scatter=List(SIZE, max=64),
            all_to_all=List(SIZE, max=64), send_recv=List(SIZE, max=64))))


def _floor(op: str) -> Setting:
    return Setting("positive", None, f"{WORDS[op]} busbw floor (GB/s); default none: "
                   "nobody publishes one per GPU model, peers judge")


SETTINGS = {
    "timeout_s": timeout(300, 600, 1200),
    **{f"min_{op}_gbps": _floor(op) for op in OPS},
    "peer_fraction": Setting("fraction", None, "fail below this share of the median of the "
                             "run's nodes of the same model and rank count, per operation; "
                             "default 0.85 on GPU nodes, off (0) on CPU nodes; lower where "
                             "the run's nodes spread wider"),
    "peer_spreads": Setting("positive", PEER_SPREADS, "robust spreads of the run's nodes a "
                            "node may fall below their median"),
    "min_bytes": Setting("int", None, "default 16 MiB on GPUs, 256 KiB on CPUs"),
    "max_bytes": Setting("int", None, "default 1 GiB on GPUs, 1 MiB on CPUs"),
    "warmup": Setting("int", 3),
    "seconds_per_size": Setting("positive", {"quick": 0.05, "standard": 0.2, "extended": 1.0}),
    "ranks": Setting("int", 2, "ranks on a CPU-only node of one CPU device"),
    "rendezvous_timeout_s": Setting("positive", 60),
}

BUSBW = Measure("collectives_busbw_gbps", "GB/s", "busbw {op} GB/s", "busbw {op}")
CHECK = Check(name="collectives", doc="the jobs' other collectives run at full speed",
              judge=judge, schema=SCHEMA, summarize=summarize, figures=figures,
              settings=SETTINGS, page_order=62, measures=(BUSBW,))
