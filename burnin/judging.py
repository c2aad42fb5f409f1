"""One place that knows how each check's judge is called: the suites use it, and so does
the inter-node all-reduce, which takes only nodes that passed the single-node checks."""

from __future__ import annotations

from burnin.checks import CHECK_ORDER, allreduce, burn, health, sdc, storage
from burnin.inventory import Node
from burnin.run import Run
from burnin.verdict import Verdict

SINGLE_NODE = tuple(c for c in CHECK_ORDER if c != "allreduce_internode")


def verdict(run: Run, check: str, node: Node) -> Verdict:
    """The verdict on `node` for `check`, running the check's probe if it has not run."""
    outcome = run.outcomes(check)[node.name]
    if check == "health":
        return health.judge(node, outcome, run.summary(check, health.fleet_summary))
    if check == "sdc":
        return sdc.judge(node, outcome, run.summary(check, sdc.fleet_summary))
    if check == "burn":
        return burn.judge(node, outcome, run.summary(check, burn.fleet_summary),
                          run.settings(check))
    if check == "storage":
        return storage.judge(node, outcome, run.settings(check))
    if check == "allreduce":
        return allreduce.judge_intra(node, outcome, run.summary(check, allreduce.intra_summary),
                                     run.settings(check))
    if check == "allreduce_internode":
        return allreduce.judge_inter(node, outcome)
    raise KeyError(check)


def failed_single_node_checks(run: Run) -> dict[str, list[str]]:
    """{node: failed checks} over the single-node checks that ran in this run."""
    out: dict[str, list[str]] = {}
    for check in SINGLE_NODE:
        if not run.has_outcomes(check):
            continue
        for node in run.nodes:
            if not verdict(run, check, node).passed:
                out.setdefault(node.name, []).append(check)
    return out
