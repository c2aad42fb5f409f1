"""health: the node is what the inventory says, and its GPUs report no fault."""

from burnin.checks import health
from burnin.verdict import assert_passed


def test_health(node, burnin_run):
    outcome = burnin_run.outcomes("health")[node.name]
    fleet = burnin_run.summary("health", health.fleet_summary)
    assert_passed(health.judge(node, outcome, fleet))
