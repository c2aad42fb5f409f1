"""memory: every word of device memory reads back as written, through every pattern."""

from burnin.model.verdict import assert_passed


def test_memory(node, burnin_run):
    assert_passed(burnin_run.verdict("memory", node))
