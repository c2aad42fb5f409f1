"""sdc: every device computes a known-answer GEMM exactly, and repeats bitwise."""

from burnin.checks import sdc
from burnin.verdict import assert_passed


def test_sdc(node, burnin_run):
    outcome = burnin_run.outcomes("sdc")[node.name]
    fleet = burnin_run.summary("sdc", sdc.fleet_summary)
    assert_passed(sdc.judge(node, outcome, fleet))
