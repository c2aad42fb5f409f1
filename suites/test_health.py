"""health: the node is what the inventory says, and its GPUs report no fault."""

from burnin.model.verdict import assert_passed


def test_health(node, burnin_run):
    assert_passed(burnin_run.verdict("health", node))
