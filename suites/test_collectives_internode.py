"""collectives_internode: all-gather, reduce-scatter, all-to-all and send/recv across
nodes at full speed; a slow node is named through the groups it was tested in, not the
whole group failed."""

import pytest

from burnin.checks.collectives_internode import excluded
from burnin.model.verdict import assert_passed


def test_collectives_internode(node, burnin_run):
    why = excluded(burnin_run.outcomes("collectives_internode")[node.name])
    if why:
        pytest.skip(why)
    assert_passed(burnin_run.verdict("collectives_internode", node))
