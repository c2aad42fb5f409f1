"""A node burnin drained is re-tested inside a MAINT reservation of the run's own. Its
MAINTENANCE and RESERVED flags are then the run's, not a refusal of the node: a salloc
refused there (the job that just left the node still completing, a slow slurmctld) is
tried once more, and refused again it leaves the node untested (skipped: not admitted),
never failed and quarantined for Slurm's doing. Seen in CI: a rolling wave's node
quarantined with "Slurm cannot give node h2: Slurm state IDLE+MAINTENANCE+RESERVED".
Slurm's commands are stood in for here; tests/test_slurm_rolling.py runs the real ones."""

from __future__ import annotations

import pytest

from burnin.model.nodes import Node
from burnin.transports import TABLE, is_busy
from burnin.transports import slurm as slurm_mod
from burnin.transports.slurmctl import SlurmNode


@pytest.fixture
def slurm(monkeypatch):
    said = {"state": "IDLE+MAINTENANCE+RESERVED", "grant_on": 2, "calls": 0}

    def salloc_holder(argv, job_name, wait_s, cancel=None):
        said["calls"] += 1
        if said["calls"] == said["grant_on"]:
            return {"SLURM_JOB_ID": "42"}, "", None
        return None, "salloc: error: Unable to allocate resources: timed out", None

    monkeypatch.setattr(slurm_mod, "salloc_holder", salloc_holder)
    monkeypatch.setattr(slurm_mod, "show_nodes", lambda names: {
        n: SlurmNode(n, said["state"], "", 0) for n in names})
    return said


def allocate(reservation: str) -> slurm_mod.Allocations:
    settings = {kind: TABLE[kind].settings() for kind in ("ssh", "srun")}
    a = slurm_mod.Allocations([Node("h1", "h1", "srun", transport_settings=settings)], "run-1")
    a._allocate(["h1"], 0, None, (), reservation)
    return a


def test_refused_once_in_its_own_reservation_it_is_tried_again(slurm):
    a = allocate("burnin-run-1-r0")
    assert slurm["calls"] == 2 and "h1" in a.where and not a.unavailable


def test_refused_twice_in_its_own_reservation_it_is_not_tested_and_not_blamed(slurm):
    slurm["grant_on"] = 0
    a = allocate("burnin-run-1-r0")
    assert slurm["calls"] == 2 and "h1" not in a.where
    assert is_busy(a.unavailable["h1"]) and "timed out" in a.unavailable["h1"]


@pytest.mark.parametrize("state, reservation, said", [
    ("IDLE+MAINTENANCE+RESERVED+NOT_RESPONDING", "burnin-run-1-r0", "NOT_RESPONDING"),
    ("IDLE+MAINTENANCE+RESERVED", "", "IDLE+MAINTENANCE+RESERVED"),  # not the run's own
    ("DOWN", "", "DOWN")])
def test_what_the_node_shows_beside_the_runs_flags_still_refuses_it(slurm, state,
                                                                   reservation, said):
    slurm["state"], slurm["grant_on"] = state, 0
    a = allocate(reservation)
    assert slurm["calls"] == 1
    assert not is_busy(a.unavailable["h1"]) and said in a.unavailable["h1"]
