"""health: the node is what the inventory says, and its GPUs report no fault."""

from burnin.checks import health
from burnin.verdict import assert_passed


def test_health(node, burnin_run):
    fleet = burnin_run.outcomes("health")
    assert_passed(health.judge(node, fleet[node.name], fleet))
