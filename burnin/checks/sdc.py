"""The sdc check's judge: any wrong element, any non-bitwise repeat, any device whose
known-answer digest is not the one most nodes of the run produced for the same inputs
(a known-answer product has one right digest everywhere) fails the node. Each node is
one vote, so a node claiming many devices cannot make the honest digest the odd one."""

from __future__ import annotations

from collections import Counter

from burnin.checks.base import (
    DEVICE_COUNT,
    DIGEST,
    DTYPE,
    PEERS,
    VERIFY_EVERY,
    WRONG_RESULT,
    Check,
    Figure,
    Fleet,
    Judging,
    Setting,
    count_problem,
    device_tflops,
    implausible,
)
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict, majority
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, Bool, Int, List, Num, Obj, Str, document


def _known_key(known: dict) -> tuple:
    return (known.get("dtype"), known.get("n"), known.get("inputs_digest"))


def fleet_summary(fleet: Fleet) -> dict[tuple, tuple[object, str, int]]:
    """Once per run: for each known-answer input set, the majority digest over the run's
    nodes, as (digest, why, nodes). A node votes with the digest most of its own devices
    produced; a node reporting more or fewer devices than it has does not vote."""
    groups: dict[tuple, dict[str, str]] = {}
    for name, o in fleet.voters():
        mine: dict[tuple, Counter] = {}
        for dev in o.data["devices"]:
            known = dev.get("known") or {}
            if known.get("digest"):
                mine.setdefault(_known_key(known), Counter())[known["digest"]] += 1
        for key, digests in mine.items():
            groups.setdefault(key, {})[name] = digests.most_common(1)[0][0]
    return {key: (*majority(digests), len(digests)) for key, digests in groups.items()}


def _where(dev: dict) -> str:
    uuid = f", {dev['uuid']}" if dev.get("uuid") else ""
    return f"{dev.get('device')} ({dev.get('name')}{uuid})"


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    summary = j.fleet
    if not outcome.ok:
        return Verdict(node.name, "sdc", (outcome.reason,))
    failures: list[str] = [f"probe error on {e}" for e in outcome.data["errors"]]
    failures += count_problem(outcome.data["devices"], j)
    for dev in outcome.data["devices"]:
        where = _where(dev)
        odd = implausible((dev.get("known") or {}).get("tflops"), j.model)
        if odd:
            failures.append(WRONG_RESULT(f"{where}: {odd}"))
        if dev.get("selftest") is False:
            failures.append(WRONG_RESULT(f"{where}: known-answer selftest failed: C differs "
                                         "from integer arithmetic"))
        known = dev.get("known")
        if known:
            failures += _known_faults(where, known, summary)
        rnd = dev.get("random")
        if rnd:
            if rnd["differing_repeats"]:
                failures.append(WRONG_RESULT(
                    f"{where}: random {rnd['dtype']} n={rnd['n']}: repeats "
                    f"{rnd['differing_repeats']} of {rnd['repeats']} differ bitwise from the "
                    "first, expected identical"))
            if rnd["nonfinite"]:
                failures.append(WRONG_RESULT(f"{where}: random {rnd['dtype']}: "
                                             f"{rnd['nonfinite']} NaN/Inf elements in the result"))
    return Verdict(node.name, "sdc", tuple(failures))


def _known_faults(where: str, known: dict, summary: dict) -> list[str]:
    out = []
    what = f"known-answer {known['dtype']} n={known['n']}"
    if not known.get("verified"):
        out.append(f"{where}: {what}: no product was verified")
    events = known.get("events", [])
    if events:  # the first in full; a faulty unit is usually wrong the same way each time
        ev = events[0]
        ex = ev["examples"][0] if ev["examples"] else None
        example = (f", e.g. C[{ex['row']},{ex['col']}] = {ex['got']!r}, expected "
                   f"{ex['expected']!r}") if ex else ""
        nonfinite = f", {ev['nonfinite']} NaN/Inf" if ev.get("nonfinite") else ""
        more = known.get("bad_products", len(events)) - 1
        others = (f"; {more} more of {known['verified']} verified products wrong"
                  if more > 0 else "")
        out.append(WRONG_RESULT(
            f"{where}: {what} product #{ev['product']}: {ev['wrong_elements']} wrong "
            f"elements{nonfinite} in rows {_short(ev['rows'])} cols "
            f"{_short(ev['cols'])}{example}{others}; expected none"))
    if sum(known["errors"].values()) and not known.get("events"):
        out.append(WRONG_RESULT(f"{where}: {what}: checksum mismatches {known['errors']}, "
                                "expected none"))
    common, why, count = summary.get(_known_key(known), (None, "", 0))
    if known.get("digest") and count >= 2:
        # Two voters that agree are a yardstick for a third; two that disagree are not
        # (neither is the odd one out): no majority fails the node only among PEERS.
        if common is None and count >= PEERS:
            out.append(f"{where}: {what}: result digest {known['digest'][:12]}: {why} "
                       f"among {count} nodes")
        elif common is not None and known["digest"] != common:
            out.append(DIGEST(f"{where}: {what}: result digest {known['digest'][:12]} differs "
                              f"from {common[:12]}, the digest of most of the run's {count} "
                              "nodes"))
    return out


def _short(items: list) -> str:
    return str(items[:8])[:-1] + (", ...]" if len(items) > 8 else "]")


def figures(record: dict) -> list[Figure]:
    return [Figure("device_tflops", (("check", "sdc"), ("device", str(dev.get("device")))),
                   dev["known"]["tflops"], "Sustained GEMM throughput per device")
            for dev in record["data"]["devices"] if (dev.get("known") or {}).get("tflops")
            is not None]


EVENT = Obj(product=COUNT, counts=Obj(values=COUNT), rows=List(COUNT, max=64),
            cols=List(COUNT, max=64), wrong_elements=COUNT, nonfinite=COUNT,
            examples=List(Obj(row=COUNT, col=COUNT, got=Num(finite=False),
                              expected=Num(finite=False)), max=64))
KNOWN = Obj(dtype=Str(16), n=Int(1, 1 << 20), products=COUNT, verified=COUNT,
            verify_every=Int(1), buffers=COUNT, wall_s=Num(0), tflops=Num(0, 1e5),
            verify_share=Num(0, 1), errors=Obj(values=COUNT), bad_products=COUNT,
            events=List(EVENT, max=64), digest=Str(128, null=True), inputs_digest=Str(128))
RANDOM = Obj(dtype=Str(16), n=Int(1, 1 << 20), repeats=COUNT,
             differing_repeats=List(COUNT, max=100_000), nonfinite=COUNT, digest=Str(128))
DEVICE = Obj(device=Str(64), name=Str(256, null=True), uuid=Str(256, null=True),
             selftest=Bool(), known=KNOWN, random=RANDOM, error=Str(4096))
SCHEMA = document(DEVICE, Obj())

CHECK = Check(
    name="sdc", page="burnin.report.summary.checks:sdc", page_order=10,
    measures=(device_tflops("sdc: known-answer GEMM TFLOPS per device"),),
    doc="arithmetic is right", judge=judge, schema=SCHEMA,
    summarize=fleet_summary, figures=figures,
    failure_kinds=(WRONG_RESULT, DIGEST, DEVICE_COUNT), settings={
        "timeout_s": Setting("positive", None, "default: 2 x duration_s + 300"),
        "duration_s": Setting("positive", {"quick": 20, "standard": 60, "extended": 300},
                              "known-answer phase, per device"),
        "n": Setting("int", None, "matrix size; default 8192 on GPU, 1024 on CPU"),
        "dtype": Setting(DTYPE, None, "bf16|fp16|fp32; default bf16 on GPU, fp32 on CPU"),
        "max_products": Setting("int", None, "stop after this many products"),
        "random_repeats": Setting("int", 8),
        "verify_every": Setting(VERIFY_EVERY, "auto",
                                "verify every k-th product; auto keeps it near 3%"),
        "memory_fraction": Setting("positive", 0.5, "GPU memory for output buffers"),
        "buffers": Setting("int", 4, "output buffers on a CPU"),
    })
