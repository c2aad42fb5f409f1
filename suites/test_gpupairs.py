"""gpupairs: every pair of a node's GPUs copies at full speed, both directions."""

from burnin.model.verdict import assert_passed


def test_gpupairs(node, burnin_run):
    assert_passed(burnin_run.verdict("gpupairs", node))
