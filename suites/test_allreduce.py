"""allreduce: GPUs inside a node, then nodes together, talk at full speed; a slow node is
named through pair figures, not the whole group failed."""

import pytest

from burnin.checks import allreduce
from burnin.judging import verdict
from burnin.verdict import assert_passed


def test_allreduce(node, burnin_run):
    assert_passed(verdict(burnin_run, "allreduce", node))


def test_allreduce_internode(node, burnin_run):
    why = allreduce.excluded(burnin_run.outcomes("allreduce_internode")[node.name])
    if why:
        pytest.skip(why)
    assert_passed(verdict(burnin_run, "allreduce_internode", node))
