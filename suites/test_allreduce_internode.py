"""allreduce_internode: nodes talk to each other at full speed; a slow node is named
through pair figures, not the whole group failed."""

import pytest

from burnin.checks.allreduce_internode import excluded
from burnin.model.verdict import assert_passed


def test_allreduce_internode(node, burnin_run):
    why = excluded(burnin_run.outcomes("allreduce_internode")[node.name])
    if why:
        pytest.skip(why)
    assert_passed(burnin_run.verdict("allreduce_internode", node))
