"""sdc: every device computes a known-answer GEMM exactly, and repeats bitwise."""

from burnin.judging import verdict
from burnin.verdict import assert_passed


def test_sdc(node, burnin_run):
    assert_passed(verdict(burnin_run, "sdc", node))
