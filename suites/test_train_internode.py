"""train_internode: the nodes train one job together; their replicas agree bit for bit
across nodes, and a diverging or straggling device is named by node and device."""

import pytest

from burnin.checks.train_internode import excluded
from burnin.model.verdict import assert_passed


def test_train_internode(node, burnin_run):
    why = excluded(burnin_run.outcomes("train_internode")[node.name])
    if why:
        pytest.skip(why)
    assert_passed(burnin_run.verdict("train_internode", node))
