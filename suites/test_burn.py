"""burn: the node holds full load without a hardware event, at the speed of its peers."""

from burnin.model.verdict import assert_passed


def test_burn(node, burnin_run):
    assert_passed(burnin_run.verdict("burn", node))
