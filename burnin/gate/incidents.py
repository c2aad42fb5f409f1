"""Shared-cause incidents: failures of one check too many, or too well confined to one
component, to be independent faults of nodes.

After judging and before any quarantine or action, the run's outcomes per check are read
as a whole. A cause that many nodes share (a storage floor no node can meet, a storage
service down, a switch slowing its leaf) is one incident of the fleet: its nodes still
fail the check (not admitted), but nobody is quarantined or acted on for it, and no
repeat-offender count grows; a person decides (docs/operator/incidents.md).

Only a failure that may have its cause outside the node counts: one whose evidence is
the node's own (a wrong product, a digest against the fleet's, an XID, ECC, a lost GPU,
a diverged replica: the FailureKinds a Check declares own, burnin/checks/base.py)
quarantines its node however many nodes show it, and its case is judged here as no
shared failure (a case with both kinds is the node's own).

Two rules, per check, over the nodes judged for it (passed, failed or errored; a node
skipped was not judged):
- topology: every node (at least `min_nodes`) sharing a value of one label the inventory
  declares as topology (`quarantine.shared_cause.labels`, by default burnin/model/nodes.py's
  TOPOLOGY_LABELS;
  never a label such as batch or owner, which says nothing of a shared cause) failed
  the check, and the component is so large that independent faults would fail some
  component of its size whole less than once in a million runs (components x RATE **
  size < CHANCE): also when nothing fails elsewhere, since any label's few members can
  fail together by chance. The incident names the component (`switch=leafB`).
- fraction: more than `fraction` of the judged nodes and at least `min_nodes` of them
  failed, and outside the components named above the failures are as widespread (more
  than `fraction` of the nodes left): one incident of every failing node.

Why the defaults (fraction 0.2, min_nodes 3): at the published rate of some 6.5
failures per 1,000 node-days (Meta's RSC, arXiv 2410.21680), a node fails a given check
in one nightly run with a probability p <= 0.0065. The chance that independent faults
alone reach the fraction rule is the binomial tail P(X >= max(3, floor(0.2 N) + 1)),
X ~ Binomial(N, p): at most 9.5e-5 at any fleet size (its worst, N = 14), 5.4e-6 at
N = 6, 1.5e-25 at N = 100; even at ten times the rate (new hardware's infant
mortality, p = 0.065) it is at most 0.058 (N = 14) and 1.6e-6 at N = 100.

Plain code, no pytest, no ledger: the decision alone (tests/fast/test_incidents.py holds it
with a Hypothesis property)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from burnin.gate.actions import ActionResult
from burnin.gate.actions import _run as run_argv
from burnin.model.incident import FRACTION, TOPOLOGY, Incident
from burnin.model.nodes import Node, SharedCauseSettings
from burnin.model.outcome import Outcome

# A node's chance of failing a check in one run: the published 6.5 failures per 1,000
# node-days (Meta's RSC, arXiv 2410.21680), all of a day's failures in one check.
RATE = 6.5 / 1000
# A component failing whole is an incident only when independent faults would fail some
# component of its size whole less often than this (at the defaults, stricter than the
# fraction rule's worst, 9.5e-5).
CHANCE = 1e-6




def fraction_reached(failing: int, judged: int, s: SharedCauseSettings) -> bool:
    """The fraction rule: more than `s.fraction` of the judged, and at least `s.min_nodes`."""
    return failing >= s.min_nodes and failing > s.fraction * judged


def detect(judged: Mapping[str, Mapping[str, bool]], labels: Mapping[str, Mapping[str, str]],
           s: SharedCauseSettings) -> list[Incident]:
    """The incidents of a run. `judged`: {check: {node: failed}} over the nodes judged for
    each check; `labels`: {node: {label: value}}. A node is in at most one incident per
    check; the topology rule, which names a component, comes first. Only the labels
    `s.labels` declares as topology name components."""
    names = s.labels
    out: list[Incident] = []
    for check in sorted(judged):
        verdicts = judged[check]
        failing = {n for n, bad in verdicts.items() if bad}
        if not failing:
            continue
        # Every component whose nodes all failed, the largest first: a switch that holds
        # three failing racks is the cause to name, not its racks one by one.
        candidates = []
        counts: dict[str, int] = {}  # components of each label
        for label in names:
            groups: dict[str, set[str]] = {}
            for node in verdicts:
                value = labels.get(node, {}).get(label)
                if value is not None:
                    groups.setdefault(value, set()).add(node)
            counts[label] = len(groups)
            candidates += [(label, value, members) for value, members in groups.items()
                           if len(members) >= 2 and members <= failing
                           and len(members) < len(verdicts)]  # all of it: fraction's to say
        candidates.sort(key=lambda c: (-len(c[2]), c[0], c[1]))
        taken: set[str] = set()
        for label, value, inside in candidates:
            elsewhere = len(failing - inside)
            if inside & taken or len(inside) < s.min_nodes:
                continue
            if counts[label] * RATE ** len(inside) >= CHANCE:
                continue  # such a group failing whole is no rarity, elsewhere failing or not
            out.append(Incident(check, TOPOLOGY, tuple(sorted(inside)), len(verdicts),
                                f"{label}={value}", len(inside), elsewhere))
            taken |= inside
        rest = failing - taken
        if rest and fraction_reached(len(failing), len(verdicts), s) and \
                len(rest) > s.fraction * (len(verdicts) - len(taken)):
            # Outside any component the failure is as widespread: the fleet's, not a
            # component's (a floor no node meets fails every switch's nodes).
            out = [i for i in out if i.check != check]
            out.append(Incident(check, FRACTION, tuple(sorted(failing)), len(verdicts),
                                figures={"fraction": s.fraction, "min_nodes": s.min_nodes}))
    return out


def by_case(incidents: list[Incident]) -> dict[tuple[str, str], Incident]:
    """{(node, check): its incident}."""
    return {(n, i.check): i for i in incidents for n in i.nodes}


def binomial_tail(n: int, p: float, k: int) -> float:
    """P(X >= k), X ~ Binomial(n, p): how often independent faults alone reach k."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    lp, lq = math.log(p), math.log1p(-p)
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1)
                                 - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)
                        for i in range(k, n + 1)))


def of_cases(cases: Mapping[tuple[str, str], object], nodes: list[Node],
             s: SharedCauseSettings) -> list[Incident]:
    """The incidents of a run's outcomes (`cases`: {(node, check): CaseResult}); a node
    skipped, in quarantine or busy, was not judged and counts for nothing. A case whose
    failures include the node's own evidence (`own`: Verdict.own's kinds) was judged but
    is no shared failure: it is quarantined whatever the count."""
    judged: dict[str, dict[str, bool]] = {}
    for (node, check), case in cases.items():
        outcome = Outcome(case.outcome)  # type: ignore[attr-defined]
        if outcome in (Outcome.SKIPPED, Outcome.NOT_RUN):
            continue
        own = bool(getattr(case, "own", ""))
        judged.setdefault(check, {})[node] = outcome.bad and not own
    return detect(judged, {n.name: n.labels for n in nodes}, s)


def mark(cases: Mapping[tuple[str, str], object], incidents: list[Incident]) -> None:
    """Start each incident node's failure message with its incident, in place: junit.xml,
    summary.html and the ledger's runs then say why nobody was quarantined. The message
    only, bounded: the output (the failure's whole text, up to kilobytes a case) is left
    as it is, as a copy of it with the incident before it cost the run a second copy of
    every failing case's text until the end (4.7 KiB a node at 2,000 nodes)."""
    words = {id(i): i.message for i in incidents}
    for key, incident in by_case(incidents).items():
        case = cases.get(key)
        if case is not None:
            case.message = f"{words[id(incident)]}; {case.message}"[:4000]  # type: ignore


def page(template: tuple[str, ...], incident: Incident, run_id: str) -> ActionResult:
    """quarantine.incident_command for one incident: argv with {run}, {check}, {component},
    {nodes} (comma-separated) and {message} replaced inside each argument; never a shell."""
    values = {"{run}": run_id, "{check}": incident.check, "{component}": incident.component,
              "{nodes}": ",".join(incident.nodes), "{message}": incident.message}
    argv = []
    for arg in template:
        for key, value in values.items():
            arg = arg.replace(key, value)
        argv.append(arg)
    ok, msg = run_argv(argv)
    return ActionResult("incident_command", incident.name, ok,
                        "paged" if ok else f"page failed: {msg}")


def summary_lines(incidents: list[Incident], still_open: Sequence[Incident] = ()) -> list[str]:
    """The terminal summary's lines for a run's incidents, first of burnin's section, and
    for earlier runs' incidents the ledger holds open (`still_open`)."""
    out = [f"OPEN {i.still_open}: {', '.join(i.nodes)}" for i in still_open]
    for i in incidents:
        out.append(f"INCIDENT {i.message}: {', '.join(i.nodes)}")
    if incidents:
        out.append("  not quarantined, no action taken: a person decides "
                   "(docs/operator/incidents.md); "
                   "burnin quarantine add --run RUN --check CHECK --reason WHY quarantines "
                   "them by hand")
    return out
