"""sdc: every device computes a known-answer GEMM exactly, and repeats bitwise."""

from burnin.model.verdict import assert_passed


def test_sdc(node, burnin_run):
    assert_passed(burnin_run.verdict("sdc", node))
