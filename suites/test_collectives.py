"""collectives: all-gather, reduce-scatter, all-to-all and send/recv inside a node."""

from burnin.model.verdict import assert_passed


def test_collectives(node, burnin_run):
    assert_passed(burnin_run.verdict("collectives", node))
