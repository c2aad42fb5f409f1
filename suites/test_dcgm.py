"""dcgm: NVIDIA DCGM's own diagnostic passes, on GPU nodes where DCGM is installed."""

from burnin.model.verdict import assert_passed


def test_dcgm(node, burnin_run):
    assert_passed(burnin_run.verdict("dcgm", node))
