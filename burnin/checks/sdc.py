"""The sdc check's judge: any wrong element, any non-bitwise repeat, any device whose
known-answer digest is not the one most devices of the run produced for the same
inputs (a known-answer product has one right digest everywhere) fails the node."""

from __future__ import annotations

from burnin.inventory import Node
from burnin.probe import ProbeOutcome
from burnin.verdict import Verdict, majority


def _known_key(known: dict) -> tuple:
    return (known.get("dtype"), known.get("n"), known.get("inputs_digest"))


def fleet_summary(fleet: dict[str, ProbeOutcome]) -> dict[tuple, tuple[object, str, int]]:
    """Once per run: for each known-answer input set, the majority digest over every
    device of every node, as (digest, why, devices)."""
    groups: dict[tuple, dict[str, str]] = {}
    for name, o in fleet.items():
        if not o.ok:
            continue
        for dev in o.data["devices"]:
            known = dev.get("known") or {}
            if known.get("digest"):
                groups.setdefault(_known_key(known), {})[f"{name}/{dev.get('device')}"] = \
                    known["digest"]
    return {key: (*majority(digests), len(digests)) for key, digests in groups.items()}


def _where(dev: dict) -> str:
    uuid = f", {dev['uuid']}" if dev.get("uuid") else ""
    return f"{dev.get('device')} ({dev.get('name')}{uuid})"


def judge(node: Node, outcome: ProbeOutcome, summary: dict) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "sdc", (outcome.reason,))
    failures: list[str] = [f"probe error on {e}" for e in outcome.data["errors"]]
    for dev in outcome.data["devices"]:
        where = _where(dev)
        if dev.get("selftest") is False:
            failures.append(f"{where}: known-answer selftest failed: C differs from "
                            "integer arithmetic")
        known = dev.get("known")
        if known:
            failures += _known_faults(where, known, summary)
        rnd = dev.get("random")
        if rnd:
            if rnd["differing_repeats"]:
                failures.append(
                    f"{where}: random {rnd['dtype']} n={rnd['n']}: repeats "
                    f"{rnd['differing_repeats']} of {rnd['repeats']} differ bitwise from the "
                    "first, expected identical")
            if rnd["nonfinite"]:
                failures.append(f"{where}: random {rnd['dtype']}: {rnd['nonfinite']} NaN/Inf "
                                "elements in the result")
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
        out.append(f"{where}: {what} product #{ev['product']}: {ev['wrong_elements']} wrong "
                   f"elements{nonfinite} in rows {_short(ev['rows'])} cols "
                   f"{_short(ev['cols'])}{example}{others}; expected none")
    if sum(known["errors"].values()) and not known.get("events"):
        out.append(f"{where}: {what}: checksum mismatches {known['errors']}, expected none")
    common, why, count = summary.get(_known_key(known), (None, "", 0))
    if known.get("digest") and count >= 2:
        if common is None:
            out.append(f"{where}: {what}: result digest {known['digest'][:12]}: {why} "
                       f"among {count} devices")
        elif known["digest"] != common:
            out.append(f"{where}: {what}: result digest {known['digest'][:12]} differs from "
                       f"{common[:12]}, the digest of most of the run's {count} devices")
    return out


def _short(items: list) -> str:
    return str(items[:8])[:-1] + (", ...]" if len(items) > 8 else "]")
