"""Finding slow nodes at fleet scale: adaptive group testing (burnin/engine/groups.py
search_slow) against the pairs it replaces (localise), on the instant transport at the
group's edge: every all-reduce group answers at once with its slowest member's link (and
its slowest switch uplink when it spans switches), so the count is the algorithm's alone.

Both go through burnin's own code: the module's run_group and group_figures are replaced
by the instant answer, each round's groups are launched together (at_once), and what is
counted is what a real fleet pays: rounds (every group of a round at once; a round costs
about one all-reduce's time) and launches (all-reduce groups started), and node-probes
(the nodes those groups held).

    PYTHONPATH=. python3 benchmarks/group_search.py [--nodes 1000,10000] [--slow 1,3]

Its last line: rounds and launches of group testing over those of pairs, at the largest
fleet with the most slow nodes.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass

from burnin.engine import groups
from burnin.model.nodes import Node

FAST, SLOW = 10.0, 0.5  # GB/s


@dataclass
class Count:
    rounds: int = 0
    launches: int = 0
    node_probes: int = 0


def instant(speed: dict[str, float], count: Count):
    """A group measure (groups.GroupMeasure) answering at once: a group's busbw is its
    slowest member's speed."""
    def measure(nodes):
        count.launches += 1
        count.node_probes += len(nodes)
        return {"busbw_gbps": min(speed[n.name] for n in nodes), "bytes": 1 << 20,
                "members": len(nodes)}
    return measure


class Run:
    """What localise and search_slow use of a GroupRun: at_once, one round at a time."""

    def __init__(self, count: Count):
        self.count = count

    def at_once(self, items, fn):
        self.count.rounds += 1
        return [fn(x) for x in items]


def one(n: int, slow: int, per_switch: int, how: str, seed: int = 1) -> tuple[Count, set]:
    rng = random.Random(seed)
    names = [f"n{i:05d}" for i in range(n)]
    bad = set(rng.sample(names, slow))
    members = [Node(x, x, labels={"switch": f"leaf{i // per_switch}"} if per_switch else {})
               for i, x in enumerate(names)]
    count = Count()
    measure = instant({x: (SLOW if x in bad else FAST) for x in names}, count)
    run = Run(count)
    settings = {"pair_fraction": 0.5, "timeout_s": 60}
    if how == "pairs":
        _, named = groups.localise(run, members, settings, None, None, measure=measure)
    else:
        _, named, _ = groups.search_slow(run, members, settings, None, None, measure=measure)
    assert set(named) == bad, (how, n, slow, sorted(named), sorted(bad))
    return count, set(named)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="1000,10000")
    p.add_argument("--slow", default="1,3")
    p.add_argument("--per-switch", type=int, default=32, help="nodes per leaf switch label")
    args = p.parse_args()
    last = None
    for n in map(int, args.nodes.split(",")):
        for k in map(int, args.slow.split(",")):
            for per_switch in (0, args.per_switch):
                pairs, _ = one(n, k, per_switch, "pairs")
                search, _ = one(n, k, per_switch, "search")
                where = f"{per_switch} per switch" if per_switch else "no labels"
                print(f"{n} nodes, {k} slow, {where}: pairs {pairs.rounds} rounds "
                      f"{pairs.launches} launches {pairs.node_probes} node-probes; "
                      f"group testing {search.rounds} rounds {search.launches} launches "
                      f"{search.node_probes} node-probes")
                last = (pairs, search)
    pairs, search = last
    print(f"group testing / pairs: rounds = {search.rounds / pairs.rounds:.3f}, "
          f"launches = {search.launches / pairs.launches:.3f}")


if __name__ == "__main__":
    main()
