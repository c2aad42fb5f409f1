"""storage: every GPU can be fed at the promised rate, and no block comes back wrong."""

from burnin.model.verdict import assert_passed


def test_storage(node, burnin_run):
    assert_passed(burnin_run.verdict("storage", node))
