"""hca: every HCA port is whole on its own, where perftest is installed."""

from burnin.model.verdict import assert_passed


def test_hca(node, burnin_run):
    assert_passed(burnin_run.verdict("hca", node))
