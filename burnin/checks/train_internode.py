"""The train job across nodes, a group check the controller executes: one data-parallel
job (probes/train.py in a group: one rank per device of every node that passed the
single-node checks, gloo on CPU nodes, NCCL on GPUs) whose replicas must agree bit for
bit after every step across nodes too, its step time and tokens/s at that scale, and a
straggler named by node and device.

Fails a node when: its probe did not run or finish, or it said it could not take part;
one of its ranks held parameters other than most ranks' after a step, or a final digest
other than theirs (every rank's fingerprint is taken from the document of the node that
hosts it), or most nodes saw one of its ranks leave the others though its own document
is silent (every rank gathers every fingerprint); one of its devices' forward and
backward time stands out from the other nodes' devices' (in a synchronous step every rank
waits for it); its document's job is not the one the controller sent the group
(burnin/checks/train_job.py). The group's own failures (it did not complete and no node
could be singled out, the loss not finite or not falling) fail every member: fail closed.
"""

from __future__ import annotations

import bisect
import statistics

from burnin.checks.base import DIVERGED, Check, Judging, Setting, timeout
from burnin.checks.group_outcomes import laid_out, observed
from burnin.checks.group_run import Facts, GroupRun
from burnin.checks.train import CHECK as TRAIN
from burnin.checks.train import RANK, STRAGGLER_FRACTION, _loss, located
from burnin.checks.train_job import job_problems, sent_job
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict, majority
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import COUNT, List, Num, Obj, Str, document

NAME = "train_internode"


def _outcome(name: str, devices: list | None = None, **figures) -> ProbeOutcome:
    return ProbeOutcome(name, NAME, True, data={"probe": "train", "schema": 1, "node": {},
                                                 "devices": devices or [], "errors": [],
                                                 "figures": figures})


def excluded(outcome: ProbeOutcome) -> str:
    """Why a node took no part in the inter-node job ('' when it did)."""
    return outcome.data.get("figures", {}).get("excluded", "") if outcome.ok else ""


def complete(outcomes: dict[str, ProbeOutcome], nodes: list[Node], facts: Facts) -> bool:
    """Every member ran, said no error, trained, and reported the layout it was given."""
    return laid_out(outcomes, nodes, facts, first_rank=0, also=_trained)


def _trained(outcome: ProbeOutcome, ranks: int) -> bool:
    """The member's document reports its tokens/s and one device per rank it was given."""
    return "tokens_per_s" in outcome.data["figures"] and len(outcome.data["devices"]) == ranks


def _where(node: str, dev: dict) -> str:
    return f"rank {dev.get('rank')} on {node} ({dev.get('device')})"


def seen_leaving(outcomes: dict[str, ProbeOutcome], nodes: list[Node], step: int,
                 host: dict[int, tuple[str, dict]]) -> dict[int, int]:
    """{rank: how many nodes saw it leave the others at `step`}: in each node's own event,
    the ranks whose fingerprint differs from that event's majority (every rank gathers
    every fingerprint, so every node sees every rank's)."""
    out: dict[int, int] = {}
    for n in nodes:
        ev = next((e for e in outcomes[n.name].data["figures"].get("diverged") or []
                   if e["step"] == step), None)
        prints = dict(enumerate(ev["fingerprints"])) if ev else {}
        common, _ = majority(prints) if prints else (None, "")
        for r, p in prints.items():
            if common is not None and p != common and r in host:
                out[r] = out.get(r, 0) + 1
    return out


def replicas(outcomes: dict[str, ProbeOutcome], nodes: list[Node]) -> dict[str, list[str]]:
    """{node: why its replicas left the others'}: per step at which any node saw replicas
    differ, each rank's fingerprint as its own node reported it; the ranks outside the
    majority are named (with no majority, every rank: fail closed); and a rank most nodes
    saw leave the others, whatever its own node says of it (a host that leaves its
    divergence out, or says the common fingerprint, is no alibi). Then the final digests."""
    host: dict[int, tuple[str, dict]] = {}
    for n in nodes:
        for d in outcomes[n.name].data["devices"]:
            host[d["rank"]] = (n.name, d)
    out: dict[str, list[str]] = {}
    steps = sorted({ev["step"] for n in nodes
                    for ev in outcomes[n.name].data["figures"].get("diverged") or []})
    for step in steps:
        prints: dict[int, int | None] = {}
        seen: dict[str, dict] = {}  # each node's own event: it alone says where its ranks differ
        for n in nodes:
            own = {d["rank"] for d in outcomes[n.name].data["devices"]}
            ev = next((e for e in outcomes[n.name].data["figures"].get("diverged") or []
                       if e["step"] == step), None)
            seen[n.name] = ev or {}
            for r in own:  # a node that saw no divergence at this step vouches the majority
                prints[r] = ev["fingerprints"][r] if ev and r < len(ev["fingerprints"]) \
                    else None
        known = {r: p for r, p in prints.items() if p is not None}
        common, _ = majority(known) if known else (None, "")
        for r, p in sorted(prints.items()):
            if p is not None and p != common:
                name, d = host[r]
                out.setdefault(name, []).append(DIVERGED(
                    f"replicas differ after step {step} across nodes: {_where(name, d)} holds "
                    f"parameters other than {'most ranks' if common is not None else 'any'} "
                    f"(fingerprint {p}, the others' {common}); expected bitwise identical"
                    + located(seen[name], r)))
        for r, count in sorted(seen_leaving(outcomes, nodes, step, host).items()):
            if 2 * count > len(nodes) and (prints.get(r) is None or prints[r] == common):
                name, d = host[r]
                said = "says nothing of it" if prints.get(r) is None else \
                    f"gives it the common fingerprint {prints[r]}"
                out.setdefault(name, []).append(DIVERGED(
                    f"replicas differ after step {step} across nodes: {_where(name, d)} holds "
                    f"parameters other than most ranks', as {count} of the {len(nodes)} "
                    f"nodes saw it (its own node's document {said}); expected bitwise "
                    "identical"))
        if out:
            return out  # the first step that differed says where
    finals = {r: d.get("digest") for r, (_, d) in host.items()}
    common, _ = majority(finals)
    for r, v in sorted(finals.items()):
        if v != common:
            name, d = host[r]
            out.setdefault(name, []).append(DIVERGED(
                f"final parameters of {_where(name, d)} differ from most ranks': digest "
                f"{str(v)[:12]}, the others' {str(common)[:12]}"))
    return out


def stragglers(outcomes: dict[str, ProbeOutcome], nodes: list[Node],
               fraction: float) -> dict[str, str]:
    """{node: why}: a device (its ranks' median forward and backward time) slower than
    the other nodes' devices' median divided by `fraction`."""
    units: dict[tuple[str, str], list[float]] = {}
    for n in nodes:
        for d in outcomes[n.name].data["devices"]:
            if d.get("compute_s"):
                units.setdefault((n.name, d["device"]), []).append(d["compute_s"])
    times = {u: statistics.median(v) for u, v in units.items()}
    ordered = sorted(times.values())
    own: dict[str, list[float]] = {}
    for (name, _), t in times.items():
        own.setdefault(name, []).append(t)
    out: dict[str, str] = {}
    for (name, device), t in times.items():
        others = len(ordered) - len(own[name])
        if not others or not fraction:
            continue
        median = _median_without(ordered, own[name])
        if t > median / fraction:
            out.setdefault(name, f"straggler across nodes: {device} on {name} takes {t:.4g} s "
                                 f"per step for forward and backward, above "
                                 f"{median:.4g} s / {fraction:g}, the "
                                 f"median of the other nodes' {others} device(s)")
    return out


def _median_without(ordered: list[float], removed: list[float]) -> float:
    """statistics.median of `ordered` (sorted) less the values `removed` (each one of its
    elements), in O(removed x log): each node's devices against every other node's took
    a list and a sort of the whole fleet per device, 10,000 of them at 10,000 nodes."""
    taken: list[int] = []  # the removed values' positions in `ordered`, ascending
    seen: dict[float, int] = {}
    for v in sorted(removed):
        taken.append(bisect.bisect_left(ordered, v) + seen.get(v, 0))
        seen[v] = seen.get(v, 0) + 1

    def kth(k: int) -> float:  # the k-th (from 0) of what is left
        for p in taken:
            if p > k:
                break
            k += 1
        return ordered[k]

    m = len(ordered) - len(removed)
    if m % 2:
        return kth(m // 2)
    return (kth(m // 2 - 1) + kth(m // 2)) / 2


def group_figures(outcomes: dict[str, ProbeOutcome], nodes: list[Node]) -> dict:
    """The job at its scale: the slowest rank's median step (every rank waits for it),
    tokens/s over the slowest rank's wall, the loss curve (rank 0's node's)."""
    ranks = [d for n in nodes for d in outcomes[n.name].data["devices"]]
    wall = max(d["wall_s"] for d in ranks)
    fig0 = outcomes[nodes[0].name].data["figures"]
    return {"members": len(nodes), "rank0": nodes[0].name, "world": len(ranks),
            "step_s": max(d["step_s"] for d in ranks),
            "tokens_per_s": round(sum(d["tokens"] for d in ranks) / wall, 3) if wall else 0.0,
            "losses": fig0.get("losses", []), "steps": fig0.get("steps", 0)}


def internode(run: GroupRun) -> dict[str, ProbeOutcome]:
    """The train_internode outcome of every selected node."""
    groups = run.groups  # the engine's (burnin/engine/groups.py)
    members, facts, result = groups.members(run, _outcome, "job")
    if facts is None:
        return result
    # The train check's settings (model, steps, floors) under this check's own; the job
    # runs with its first member's (the rendezvous master's), each under its own timeout.
    own = {n.name: {**run.settings(TRAIN.name, n),
                    **{k: v for k, v in run.settings(NAME, n).items() if v is not None}}
           for n in members}
    settings = own[members[0].name]
    timeouts = {name: float(s["timeout_s"]) for name, s in own.items()}
    outcomes: dict[str, ProbeOutcome] = {}
    done = False
    while len(members) >= 2:
        outcomes = groups.run_group(run, members, settings, facts, timeouts, probe=TRAIN)
        done = complete(outcomes, members, facts)
        if done:
            break
        culprits = observed(outcomes)
        for name, why in culprits.items():
            result[name] = _outcome(name, group_failure=f"did not take part in the inter-node "
                                                        f"train job: {why}")
        if not culprits:
            break
        members = [n for n in members if n.name not in culprits]
    if not done:
        said = "; ".join(f"{n} said: {'; '.join(o.data['errors'])}" if o.ok else
                         f"{n}: {o.reason}" for n, o in outcomes.items()
                         if not o.ok or o.data["errors"])
        for n in members:
            result.setdefault(n.name, _outcome(
                n.name, group_failure="the inter-node train job did not complete, and no "
                                      f"node could be singled out ({said or 'no error'})"))
        return result
    group = group_figures(outcomes, members)
    loss = _loss({"losses": group["losses"]}, settings)
    named = replicas(outcomes, members)
    strag = settings.get("straggler_fraction")
    cpu = all(facts.gpus[m.name] == 0 for m in members)
    slow = stragglers(outcomes, members,
                      STRAGGLER_FRACTION["cpu" if cpu else "gpu"] if strag is None else strag)
    for n in members:
        fig: dict = {"group": group, "replicas": named.get(n.name, [])}
        if n.name in slow:
            fig["straggler"] = slow[n.name]
        # The job the controller sent every member (the group's settings, its world): a
        # member's document that says it ran another is its own failure.
        sent = {**sent_job(settings, facts.gpus[n.name], None), "world": group["world"]}
        job = job_problems(outcomes[n.name].data["figures"], outcomes[n.name].data["devices"],
                           sent)
        if job:
            fig["job"] = job[0]
        if loss:
            fig["group_failure"] = f"the inter-node job's {loss[0]}"
        result[n.name] = _outcome(n.name, outcomes[n.name].data["devices"], **fig)
    return result


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, NAME, (outcome.reason,))
    fig = outcome.data["figures"]
    # Each entry of `replicas` is a divergence the group named: the node's own evidence,
    # also when the figures come back from results.jsonl (burnin rejudge).
    failures = [*outcome.data["errors"], *map(DIVERGED, fig.get("replicas", []))]
    failures += [fig[k] for k in ("straggler", "job", "group_failure") if fig.get(k)]
    return Verdict(node.name, NAME, tuple(failures))


GROUP = Obj(members=COUNT, rank0=Str(256), world=COUNT, step_s=Num(0), tokens_per_s=Num(0),
            losses=List(Num(finite=False), max=100_000), steps=COUNT)
# The controller writes these records itself, from the members' validated documents.
SCHEMA = document(RANK, Obj(group=GROUP, replicas=List(Str(2048), max=1024),
                            straggler=Str(2048), job=Str(1 << 14), group_failure=Str(1 << 16),
                            excluded=Str(2048)))

CHECK = Check(name=NAME, doc="the nodes train one job together, replicas alike across nodes",
              judge=judge, schema=SCHEMA, execute=internode, probe="train",
              page="burnin.report.summary.train_part:internode", page_order=71,
              failure_kinds=(DIVERGED,),
              settings={"timeout_s": timeout(300, 600, 1800),
                        "steps": Setting("int", None, "default the train check's"),
                        "straggler_fraction": Setting("fraction", None, "a device slower "
                                                      "than the other nodes' devices' "
                                                      "median / this fails; default the "
                                                      "train check's (0.8 GPU, 0.25 CPU)")})
