"""Finding the slow nodes of a slow inter-node all-reduce by adaptive group testing,
topology first: the decision alone, over a `measure` that runs one round of groups at
once (burnin/engine/groups.py: search_slow runs it on real probes).

A group's all-reduce runs at its slowest member's link, so a group is slow exactly when
it holds a slow node (or a slow link between its parts). Instead of pairing every node
(N pairs, N all-reduce launches, every node twice; NVIDIA's Cluster Readiness Engine saw
exhaustive pairs reach 26,796 groups at 232 nodes, its design doc 055):

1. inside: one group per value of the topology label (a switch's nodes), cut to at most
   MAX_GROUP; every group of the round at once;
2. the yardstick: the inventory's floor, else `fraction` of a high quantile (QUANTILE) of
   the first round's groups: the fleet's fastest consistent groups, which slow nodes
   cannot own the way they own a median once a quarter of the fleet is slow;
3. split: each slow group is cut in halves (bisection), a half of one node tested with a
   known-good partner; a half that is fast clears its nodes;
4. across: where nothing inside was slow but the fleet's group was, groups of one node
   per label value (the links between switches), split the same way;
5. confirm: every suspect once more with a known-good partner (from another label value
   where there is one), never one it was slow with: only a node slow again is named. A
   slow one-node test suspects its partner too (a link that flaps after the first round
   would otherwise get a healthy node named), confirmed in turn; a confirmation whose
   partner is then named itself is made again with another. A label value whose every node
   was named stayed slow whatever it was split into: a component (the shared-cause
   incident rule of burnin/gate/incidents.py names it in the outputs).

Rounds: 1 + log2(MAX_GROUP) + 2 or so, whatever the fleet's size; launches: the groups of
the first round plus about 2 log2(MAX_GROUP) + 2 per slow node (benchmarks/group_search.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

# Nodes in one group of the first round: the group checks' records are bounded by it.
from burnin.checks.group_run import MAX_GROUP

QUANTILE = 0.9   # the yardstick: this quantile of the first round's groups

# One round: every group at once (disjoint nodes); for each, (completed, busbw GB/s).
Measure = Callable[[list[list[str]]], list[tuple[bool, float]]]


@dataclass(frozen=True)
class Search:
    """What the search found: `named` {node: why}; every group it tested, in order."""

    named: dict[str, str]
    tests: list[dict]
    rounds: int
    threshold: float
    source: str                      # where the yardstick came from, said on verdicts
    components: tuple[str, ...] = ()  # label values whose every node was named
    suspects: tuple[str, ...] = field(default=())  # slow once, not confirmed (or untestable)


def topology_label(labels: dict[str, dict[str, str]], names: list[str] | None = None) -> str:
    """The label to group by: of those every member has, the coarsest that still splits
    the members (fewest values above one: a switch before a rack); '' for none."""
    members = list(labels)
    keys = set.intersection(*(set(labels[m]) for m in members)) if members else set()
    if names is not None:
        keys &= set(names)
    best = ("", 0)
    for key in sorted(keys):
        values = len({labels[m][key] for m in members})
        if values > 1 and (not best[0] or values < best[1]):
            best = (key, values)
    return best[0]


def _chunks(nodes: list[str], size: int) -> list[list[str]]:
    """`nodes` in groups of `size` to 2 x size - 1 (never a lone node where two or more)."""
    parts = max(1, len(nodes) // size)
    return [nodes[i::parts] for i in range(parts)]


def quantile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def find_slow(members: list[str], where: dict[str, str], measure: Measure,
              floor: float | None, fraction: float, label: str = "",
              what: str = "an all-reduce") -> Search:
    """The slow nodes among `members` (`where`: each one's value of the topology label
    `label`, all '' without one; `what`: the group's words, "an all-reduce")."""
    s = _Searching(where, measure, what, floor)
    by_value: dict[str, list[str]] = {}
    for m in members:
        by_value.setdefault(where.get(m, ""), []).append(m)
    inside = _inside_groups(by_value, len(members))
    first = s.yardstick(inside, fraction) if floor is None else s.run(inside, "inside")
    suspects = _bisect(first, s.run)
    values = [v for v in by_value if v]
    if not suspects and len(values) >= 2 and not any(slow for _, slow in first):
        width = max(len(by_value[v]) for v in values)
        across = [[by_value[v][i] for v in values if i < len(by_value[v])]
                  for i in range(width)]
        across = [c for g in across for c in _chunks(g, MAX_GROUP) if len(c) >= 2]
        suspects = _bisect(s.run(across, "across"), s.run)
    named = s.confirm(suspects)
    whole = [v for v in values
             if len(by_value[v]) >= 2 and all(x in named for x in by_value[v])]
    for v in whole:  # its nodes' verdicts say so; the incident rule names it in the outputs
        for x in by_value[v]:
            named[x] += f"; every node of {label}={v} stayed slow whatever it was split " \
                        "into: a component, not a node"
    components = tuple(f"{label}={v}" for v in whole)
    return Search(named, s.tests, s.rounds, s.threshold, s.source, components,
                  tuple(sorted(set(suspects) - set(named))))


def _inside_groups(by_value: dict[str, list[str]], members: int) -> list[list[str]]:
    """The first round's groups: each label value's nodes in groups of about sqrt(N) (at
    most MAX_GROUP: enough of them that the yardstick's quantile has groups to compare,
    few enough that the first round stays cheap); values of one node tested together."""
    size = min(MAX_GROUP, max(2, math.isqrt(members)))
    inside = [c for nodes in by_value.values() for c in _chunks(nodes, size)]
    lone = [c for c in inside if len(c) < 2]
    inside = [c for c in inside if len(c) >= 2]
    if lone:  # values of one node: tested together, across values
        rest = [x for c in lone for x in c]
        if len(rest) >= 2:
            inside.append(rest)
        elif inside:
            inside[-1] = inside[-1] + rest
        else:
            inside = [rest]
    return inside


class _Searching:
    """One search's state: every group tested, the known-good nodes, who was slow with
    whom, the rounds, and the yardstick."""

    def __init__(self, where: dict[str, str], measure: Measure, what: str,
                 floor: float | None):
        self.where, self.measure, self.what = where, measure, what
        self.tests: list[dict] = []
        self.rounds = 0
        self.good: set[str] = set()
        # A one-node test that is slow says only that the node or its partner is: the
        # partner becomes a suspect too (a link that flaps after the first round), and
        # neither is ever confirmed with the other.
        self.slow_with: dict[str, set[str]] = {}
        self.blamed: list[str] = []
        self.threshold = floor if floor is not None else 0.0
        self.source = f"the floor of {floor:g} GB/s" if floor is not None else ""

    def yardstick(self, inside: list[list[str]], fraction: float
                  ) -> list[tuple[list[str], bool]]:
        """The first round, without a floor: the yardstick comes from it."""
        self.rounds += 1
        results = self.measure(inside)
        done = [b for ok, b in results if ok]
        top = quantile(done, QUANTILE) if done else 0.0
        self.threshold = fraction * top
        self.source = (f"{fraction:g} of the fleet's fast groups ({QUANTILE:.0%} quantile "
                       f"{top:.3f} GB/s of {len(done)} groups)")
        first = []
        for g, (ok, busbw) in zip(inside, results, strict=True):
            slow = not ok or busbw < self.threshold
            self.tests.append({"nodes": g, "busbw_gbps": busbw, "completed": ok,
                               "round": self.rounds, "kind": "inside"})
            if not slow:
                self.good.update(g)
            first.append((g, slow))
        return first

    def run(self, groups: list[list[str]], kind: str) -> list[tuple[list[str], bool]]:
        """One round; (group, slow) for each group tested (a one-node group is paired
        with a known-good partner, or left for a later round when none is free)."""
        launched, partnered = self._partner(groups, kind)
        if not launched:
            return []
        self.rounds += 1
        out = []
        for g, with_, (done, busbw) in zip(launched, partnered, self.measure(launched),
                                           strict=True):
            slow = not done or busbw < self.threshold
            self.tests.append({"nodes": g, "busbw_gbps": busbw, "completed": done,
                               "round": self.rounds, "kind": kind})
            tested = [x for x in g if x != with_]
            if not slow:
                self.good.update(g)
            elif with_ is not None:
                self.slow_with.setdefault(tested[0], set()).add(with_)
                self.slow_with.setdefault(with_, set()).add(tested[0])
                self.blamed.append(with_)
            out.append((tested, slow))
        return out

    def _partner(self, groups: list[list[str]], kind: str
                 ) -> tuple[list[list[str]], list[str | None]]:
        """The groups to launch, a one-node group with its known-good partner (from its
        own label value; for a confirmation, from another where there is one)."""
        where = self.where
        free = sorted(self.good - {x for g in groups for x in g})
        launched: list[list[str]] = []
        partnered: list[str | None] = []
        for g in groups:
            if len(g) >= 2:
                launched.append(g)
                partnered.append(None)
                continue
            fresh = [p for p in free if p not in self.slow_with.get(g[0], ())]
            pick = [p for p in fresh if where.get(p) == where.get(g[0])] or fresh
            if kind == "confirm":  # another value's partner: the link out too
                pick = [p for p in fresh if where.get(p) != where.get(g[0])] or pick
            if not pick:
                continue
            chosen = pick[0]  # before the removal: `pick` may be `free` itself
            free.remove(chosen)
            launched.append(g + [chosen])
            partnered.append(chosen)
        return launched, partnered

    def confirm(self, suspects: list[str]) -> dict[str, str]:
        """Every suspect, and every partner a slow one-node test blamed, once more with a
        known-good partner: {node: why} for those slow again."""
        named: dict[str, str] = {}
        confirmed_with: dict[str, str] = {}
        suspected = set(suspects)
        untested: list[str] = list(suspects)
        partners: list[str] = []
        while untested or partners:
            # The partners slow one-node tests blamed are suspects too, confirmed once the
            # nodes they were slow with are: they stay partners meanwhile (a slow switch's
            # every node blames its partner, and would leave none to confirm them with).
            partners += [p for p in dict.fromkeys(self.blamed) if p not in suspected]
            suspected.update(self.blamed)
            self.blamed.clear()
            queue = untested if untested else partners
            before = len(self.tests)
            confirmed = self.run([[x] for x in queue], "confirm")
            if len(self.tests) == before:
                break  # no known-good partner left: nobody more can be confirmed
            for (node,), slow in ((g, x) for g, x in confirmed):
                f = next(t for t in reversed(self.tests) if node in t["nodes"])
                partner = next(x for x in f["nodes"] if x != node)
                queue.remove(node)
                if slow:
                    confirmed_with[node] = partner
                    self.good.discard(node)  # no longer anyone's known-good partner
                    named[node] = self._why(f, partner)
            # A confirmation whose partner proved slow itself confirms nothing: once more,
            # with another partner.
            for node in [x for x, p in confirmed_with.items() if p in named and x in named]:
                del named[node], confirmed_with[node]
                untested.append(node)
        return named

    def _why(self, test: dict, partner: str) -> str:
        if not test["completed"]:
            return f"could not complete {self.what} with known-good {partner}"
        return (f"{test['busbw_gbps']:.3f} GB/s with known-good {partner}, below "
                f"{self.threshold:.3f} GB/s ({self.source}); slow in every group it was "
                "in, confirmed")


def _bisect(slow_groups: list[tuple[list[str], bool]], run) -> list[str]:
    """Split every slow group in halves, round after round, until each slow part is one
    node: the suspects."""
    suspects: list[str] = []
    pending = [g for g, slow in slow_groups if slow]
    waiting: list[list[str]] = []  # one-node halves not yet tested: no partner was free
    while pending or waiting:
        halves = list(waiting)
        for g in pending:
            if len(g) == 1:  # slow alone with a known-good partner
                suspects.append(g[0])
                continue
            halves += [g[: len(g) // 2], g[len(g) // 2:]]
        if not halves:
            break
        results = run(halves, "split")
        tested = {tuple(g) for g, _ in results}
        # A one-node half with no free known-good partner this round is tested in the
        # next, not taken for a suspect untested: its only slow figure would be its
        # group's, which its slow neighbour may have made (a healthy node was named on
        # that and one noisy confirmation, where the design wants it slow alone twice).
        untested = [h for h in halves if tuple(h) not in tested]
        if untested and len(untested) == len(halves):
            suspects += [x for h in untested for x in h]  # nobody known-good: no partner
            break
        pending, waiting = [g for g, slow in results if slow], untested
    return list(dict.fromkeys(suspects))
