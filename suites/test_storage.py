"""storage: every GPU can be fed at the promised rate, and no block comes back wrong."""

from burnin.checks import storage
from burnin.verdict import assert_passed


def test_storage(node, burnin_run):
    outcome = burnin_run.outcomes("storage")[node.name]
    assert_passed(storage.judge(node, outcome, burnin_run.settings("storage")))
