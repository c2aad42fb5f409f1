"""fabric: the node's InfiniBand / RoCE ports and its GPUs' NVLink links are up."""

from burnin.model.verdict import assert_passed


def test_fabric(node, burnin_run):
    assert_passed(burnin_run.verdict("fabric", node))
