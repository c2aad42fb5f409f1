"""allreduce: GPUs inside a node talk at full speed (the intra-node sweep)."""

from burnin.model.verdict import assert_passed


def test_allreduce(node, burnin_run):
    assert_passed(burnin_run.verdict("allreduce", node))
