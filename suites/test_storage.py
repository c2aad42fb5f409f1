"""storage: every GPU can be fed at the promised rate, and no block comes back wrong."""

from burnin.judging import verdict
from burnin.verdict import assert_passed


def test_storage(node, burnin_run):
    assert_passed(verdict(burnin_run, "storage", node))
