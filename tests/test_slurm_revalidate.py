"""Slurm as it was before the run: re-validation as an sbatch job (the docs' script) brings
repaired nodes back, and Ctrl-C leaves no allocation, step, reservation or burnin state
behind, on a real Slurm test cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support import docpages
from support.replay import replay_python
from support.requires import need, sigint_ignored
from support.slurmcluster import calls, logged_commands, option
from support.suiterun import NO_HYPOTHESIS, REPO, SUITES
from test_interrupt import LONG, admit, probes_on, wait_for
from test_slurm import TINY, slurm_inventory

from burnin.ledger.api import Ledger

# Real SSH hosts or a real Slurm cluster, or a benchmark: minutes, not seconds. CI runs
# them all; `-m "not slow"` leaves them out of a developer's quick run.
pytestmark = pytest.mark.slow

REASON = "burnin: failed health"


def readme_revalidation_script() -> str:
    """The docs' sbatch script for periodic re-validation, as written there
    (docs/operator/revalidation.md today; found by its job name, exactly once)."""
    return textwrap.dedent(docpages.the_block("bash", "#SBATCH --job-name=burnin-revalidate"))


def quarantined_by_burnin(cluster, ledger: Path, node: str) -> None:
    """`node` as a failed run leaves it: in the ledger, and drained with burnin's reason."""
    db = Ledger(ledger)
    db.record_failure(node, "test", ["health"], ["health: GPU has fallen off the bus"], {},
                      "earlier-run")
    db.set_drained(node, True)
    cluster.scontrol("update", f"nodename={node}", "state=drain", f"reason={REASON}")


def slurm_state(cluster) -> tuple[str, str]:
    """(jobs, burnin reservations) as squeue and scontrol show them."""
    env = cluster.env()
    jobs = subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=env,
                          timeout=30).stdout.strip()
    reservations = subprocess.run(["scontrol", "show", "reservation"], capture_output=True,
                                  text=True, env=env, timeout=30).stdout
    return jobs, "\n".join(ln for ln in reservations.splitlines() if "burnin-" in ln)


def test_the_documented_sbatch_revalidation_brings_a_repaired_node_back(make_slurm, tmp_path):
    cluster = make_slurm(3)
    ledger = tmp_path / "ledger.db"
    quarantined_by_burnin(cluster, ledger, "h2")
    # What is tested is the docs' job and the re-validation around the probes (Slurm's
    # reservation, allocation, release, resume), not the probes: they replay recorded
    # documents (tests/support/replay.py), but for health, which quarantined h2.
    inv = slurm_inventory(cluster, tmp_path / "inv.yaml", checks=TINY,
                          defaults={"python": replay_python(tmp_path / "replay",
                                                            real=("health",))},
                          quarantine={"ledger": str(ledger), "actions": ["slurm"],
                                      "release_after": 1})
    log = tmp_path / "revalidate.log"
    job = readme_revalidation_script()
    for readme, here in (("/opt/burnin/venv/bin/python", sys.executable),
                         ("cd /opt/burnin", f"cd {REPO}"),
                         ("/etc/burnin/slurm.yaml", str(inv)),
                         ("/var/lib/burnin/reports", str(tmp_path / "reports")),
                         ("/var/log/burnin/revalidate-%j.log", str(log))):
        assert readme in job, f"the docs' script no longer has {readme!r}"
        job = job.replace(readme, here)
    (tmp_path / "revalidate.sh").write_text(job)
    res = subprocess.run(["sbatch", "--wait", str(tmp_path / "revalidate.sh")],
                         capture_output=True, text=True, env={**cluster.env(), **NO_HYPOTHESIS},
                         timeout=900)
    out = log.read_text() if log.exists() else ""
    assert res.returncode == 0, res.stdout + res.stderr + out[-4000:]
    assert "released from quarantine: h2" in out, out[-4000:]
    assert Ledger(ledger).quarantined() == set()
    wait_for(lambda: cluster.state("h2")[0] == "idle", 30, "h2 back in production")
    wait_for(lambda: slurm_state(cluster) == ("", ""), 30, "no job or reservation left")


def test_ctrl_c_leaves_slurm_as_it_was_before_the_run(make_slurm, tmp_path, finding):
    """Two allocations at once: h1 and h3 as they are, h2 (drained by burnin, released by
    hand from the ledger) from a reservation of the run's own."""
    need(sigint_ignored())
    cluster = make_slurm(3)
    path, log = logged_commands(tmp_path / "bin")
    cluster.scontrol("update", "nodename=h2", "state=drain", f"reason={REASON}")
    before = {h.name: cluster.state(h.name) for h in cluster.hosts.hosts}
    inv = slurm_inventory(cluster, tmp_path / "inv.yaml", checks=LONG,
                          quarantine={"ledger": str(tmp_path / "ledger.db"),
                                      "actions": ["slurm"]})
    Ledger(tmp_path / "ledger.db")  # burnin ledger init: a run never creates one
    reports = tmp_path / "reports"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", SUITES, "--inventory", str(inv),
                             "--reports", str(reports), "-k", "burn", "-p", "no:cacheprovider",
                             "-q"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True,
                            env={**cluster.env(), **NO_HYPOTHESIS, "PATH": path})
    try:
        wait_for(lambda: len(probes_on(cluster.hosts, "burn")) >= 3, 180,
                 "a burn probe on every node")
    except AssertionError:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(proc.communicate()[0].decode(errors="replace")[-3000:]) from None
    assert {option(c["argv"], "reservation") is not None for c in calls(log, "salloc")} == \
        {True, False}, "one allocation from the reservation, one without"
    assert slurm_state(cluster)[1], "the run's reservation exists while it runs"
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    took = time.monotonic() - sent
    text = out.decode(errors="replace")
    finding(f"srun interrupt: Ctrl-C during a 240 s burn in two allocations on 3 Slurm "
            f"hosts: run ended {took:.1f} s later, Slurm as before")
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, text[-3000:]
    assert probes_on(cluster.hosts, "burn") == [], "a probe burns on after the run stopped"
    assert slurm_state(cluster) == ("", ""), "an allocation, step or reservation was left"
    assert {h.name: cluster.state(h.name) for h in cluster.hosts.hosts} == before
    assert Ledger(tmp_path / "ledger.db").quarantined() == set()
    res = admit(reports / "latest" / "junit.xml")
    assert res.returncode == 2 and "did not complete" in res.stderr, res.stderr


def test_a_retest_waits_until_slurm_says_the_nodes_last_job_has_completed(make_slurm, tmp_path):
    """The job before the run (the previous run's, or anyone's) has ended but its epilog
    still runs past salloc's --immediate (10 s here): the node stays COMPLETING. The re-test
    waits for Slurm to say the node is free instead of failing it as busy, and its own job
    (an epilog of a few seconds: that one is not the job before) is gone when it ends."""
    cluster = make_slurm(2, epilog_s=20)
    ledger = tmp_path / "ledger.db"
    subprocess.run(["salloc", "--exclusive", "--nodelist=h2", "--nodes=1", "--", "true"],
                   capture_output=True, env=cluster.env(), timeout=120, check=True)
    quarantined_by_burnin(cluster, ledger, "h2")
    assert "COMPLETING" in subprocess.run(
        ["scontrol", "show", "node", "h2", "--oneliner"], capture_output=True, text=True,
        env=cluster.env(), timeout=30).stdout, "the job before must still be completing"
    cluster.set_epilog(3)  # the run's own job: still COMPLETING a moment after it ends
    inv = slurm_inventory(cluster, tmp_path / "inv.yaml",
                          defaults={"python": replay_python(tmp_path / "replay")},
                          quarantine={"ledger": str(ledger), "actions": ["slurm"]})
    res = subprocess.run([sys.executable, "-m", "pytest", SUITES, "--inventory", str(inv),
                          "--reports", str(tmp_path / "reports"), "-k", "health",
                          "--revalidate", "-p", "no:cacheprovider", "-q"], cwd=REPO,
                         capture_output=True, text=True, env={**cluster.env(), **NO_HYPOTHESIS},
                         timeout=600)
    assert res.returncode == 0, res.stdout[-3000:]
    assert slurm_state(cluster) == ("", ""), "no job or reservation left"
