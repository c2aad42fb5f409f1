"""health: the node is what the inventory says, and its GPUs report no fault."""

from burnin.judging import verdict
from burnin.verdict import assert_passed


def test_health(node, burnin_run):
    assert_passed(verdict(burnin_run, "health", node))
