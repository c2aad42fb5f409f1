"""A site's command (a rolling hook, a remediation step) ends at its time-out even when it
started a child that outlives its shell: burnin/gate/remediation_steps.local kills its
whole process group. Without that, the wait lasted as long as the child held the output
pipe (a `sleep 30` under a 0.5 s time-out took its 30 s)."""

from __future__ import annotations

import time

from burnin.gate.remediation_steps import local


def test_a_command_whose_child_outlives_the_time_out_ends_at_it():
    t0 = time.monotonic()
    done = local(["sh", "-c", "echo started; sleep 30; echo never"], 0.5, 2000)
    took = time.monotonic() - t0
    assert not done.ok and done.said == "timed out after 0.5 s", done
    assert "started" in done.output and "never" not in done.output, done.output
    assert took < 5, f"took {took:.1f} s past a 0.5 s time-out"


def test_a_command_that_ends_in_time_says_its_exit_and_output():
    done = local(["sh", "-c", "echo hi; exit 3"], 10, 2000)
    assert not done.ok and done.said == "exit 3" and "hi" in done.output
