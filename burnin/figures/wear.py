"""Wear: the counters that grow before a GPU fails, read from a run's probe documents and
kept, bounded, among the ledger's runs (NodeRun.figures["wear"]), so that their trend
across runs can be read (burnin/figures/replace_soon.py).

Which check's document gives each counter, and how it is read: burnin/checks/wear.py.
Kept as {"wear": {counter: {device: value}}, "wear_read": [counter, ...]}, a device a
GPU's index ("node" for what is the node's: the thermal margin, the XIDs of a GPU no
longer there). Bounded: only the counters above, at most MAX_DEVICES devices each,
finite numbers only, zero counts left out (a healthy fleet keeps next to nothing);
`wear_read` names the counters the run read, so that a counter left out reads as zero
where it was read and as unknown where it was not (a check that did not run, an older
probe without the reading).

Layer 6 (burnin/figures): imports checks and model below it.
"""

from __future__ import annotations

from burnin.checks.wear import MAX_DEVICES, READ, SOURCES, Wear, count

__all__ = ["MAX_DEVICES", "SOURCES", "Wear", "figures", "kept", "of_document", "of_run"]


def of_document(check: str, data) -> Wear:
    """The wear counters of one node's `check` document, with READ naming those read
    ({} for a check that has none, or a document they cannot be read from: a probe's
    document is untrusted input)."""
    read = SOURCES.get(check)
    if read is None or not isinstance(data, dict):
        return {}
    try:
        return read(data)
    except (TypeError, ValueError, AttributeError):
        return {}


def figures(parts: list[Wear]) -> dict:
    """One node's wear over its checks, as its kept run holds it (NodeRun.figures):
    {"wear": {counter: {device: value}}, "wear_read": [counter, ...]}."""
    wear: Wear = {}
    read: set[str] = set()
    for part in parts:
        for counter, per in part.items():
            if counter == READ:
                read.update(per)
            else:
                wear.setdefault(counter, {}).update(per)
    return {"wear": wear, "wear_read": sorted(read)} if read else {}


def of_run(run) -> dict[str, dict]:
    """{node: its kept wear (figures())} from the checks of SOURCES that ran in `run`
    (burnin/engine/run.py keeps each node's when it judges the check, as it keeps the
    speed-bearing figures)."""
    out: dict[str, list[Wear]] = {}
    for check in SOURCES:
        if not run.store.has(check):
            continue
        for node, wear in run.wear(check).items():
            out.setdefault(node, []).append(wear)
    return {node: f for node, parts in out.items() if (f := figures(parts))}


def kept(figures_kept) -> tuple[Wear, frozenset[str]]:
    """A kept run's (wear, counters read) as read back from the ledger: only what
    figures() could have written (a hand-edited or foreign ledger must not break the
    list)."""
    out: Wear = {}
    if not isinstance(figures_kept, dict):
        return out, frozenset()
    value, read = figures_kept.get("wear"), figures_kept.get("wear_read")
    names = frozenset(c for c in read if isinstance(c, str)) if isinstance(read, list) \
        else frozenset()
    if not isinstance(value, dict):
        return out, names
    for counter, per in value.items():
        if not isinstance(counter, str) or not isinstance(per, dict):
            continue
        for device, v in list(per.items())[:MAX_DEVICES]:
            if isinstance(device, str) and count(v) is not None:
                out.setdefault(counter, {})[device] = float(v)
    return out, names
