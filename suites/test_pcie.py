"""pcie: every GPU can be fed from the host, alone and all at once."""

from burnin.model.verdict import assert_passed


def test_pcie(node, burnin_run):
    assert_passed(burnin_run.verdict("pcie", node))
