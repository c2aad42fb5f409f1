"""burn: the node holds full load without a hardware event, at the speed of its peers."""

from burnin.checks import burn
from burnin.verdict import assert_passed


def test_burn(node, burnin_run):
    outcome = burnin_run.outcomes("burn")[node.name]
    fleet = burnin_run.summary("burn", burn.fleet_summary)
    assert_passed(burn.judge(node, outcome, fleet, burnin_run.settings("burn")))
