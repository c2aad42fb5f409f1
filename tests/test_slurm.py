"""The srun transport and the Slurm actions on a real Slurm test cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from slurmcluster import calls, logged_commands, option
from suiterun import junit_cases, run_suite, script

from burnin.ledger import Ledger

TINY = {"sdc": {"duration_s": 0.2, "n": 64, "random_repeats": 2},
        # The hosts share this machine's cores: peers are not independent here.
        "burn": {"duration_s": 1, "n": 128, "sample_s": 0.25, "peer_fraction": 0},
        "storage": {"size_gb": 0.02, "streams": 2, "stream_fraction": 0},
        "allreduce": {"max_bytes": 262144, "seconds_per_size": 0.02, "peer_fraction": 0,
                      "pair_fraction": 0}}


def slurm_inventory(cluster, path: Path, nodes: dict | None = None,
                    defaults: dict | None = None, **extra) -> Path:
    doc = cluster.hosts.inventory(transport="srun",
                                  workdir=str(cluster.hosts.workdir / "remote"))
    doc["defaults"]["srun"] = {"partition": "test"}
    doc["defaults"]["ssh"] = {"connect_timeout_s": 3}  # salloc's --immediate
    doc["defaults"].update(defaults or {})
    for entry in doc["nodes"]:
        entry.update((nodes or {}).get(entry["name"], {}))
    doc.update(extra)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def jobs_left(cluster) -> str:
    """Slurm's jobs (pending, running or still completing) on the test cluster."""
    res = subprocess.run(["squeue", "-h"], capture_output=True, text=True, env=cluster.env(),
                         timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_drain_admit_revalidate_resume_and_an_administrators_drain_stays(pytester,
                                                                         make_slurm,
                                                                         monkeypatch):
    cluster = make_slurm(3)
    path, log = logged_commands(pytester.path / "bin")
    monkeypatch.setenv("PATH", path)
    py = pytester.path / "py-h2"

    def h2_python(healthy: bool) -> None:
        script(py, f"exec {sys.executable} \"$@\"\n" if healthy else
               "echo 'GPU has fallen off the bus' >&2\nexit 3\n")

    h2_python(healthy=False)
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml", nodes={"h2": {"python": str(py)}},
                          quarantine={"ledger": str(pytester.path / "ledger.db"),
                                      "actions": ["slurm"]})
    cluster.scontrol("update", "nodename=h3", "state=drain", "reason=admin: fan replaced")

    result, reports = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=1, failed=2)
    cases = junit_cases(reports)
    assert "Slurm cannot give node h3" in cases["h3"]["health"][1]
    assert cluster.state("h2") == ("drained", "burnin: failed health")
    assert cluster.state("h3") == ("drained", "admin: fan replaced")
    result.stdout.fnmatch_lines(["*slurm on h3: already drained by someone else*"])

    # A health-only run: admission asks for exactly that (by default it wants every check).
    admit = subprocess.run([sys.executable, "-m", "burnin.cli", "admit",
                            str(reports / "latest" / "junit.xml"), "--require", "health"],
                           capture_output=True, text=True, timeout=60)
    assert admit.returncode == 1
    assert "admitted (1): h1" in admit.stdout and "  h2: health: failure:" in admit.stdout

    (first,) = calls(log, "salloc")
    assert option(first["argv"], "nodelist") == "h[1-2]" and "--reservation" not in str(first)
    assert jobs_left(cluster) == "", "a run ends only when Slurm has its allocation back"

    h2_python(healthy=True)  # repaired
    for clean in (1, 2):
        # Back to back: the previous run's allocation is gone before the next one asks.
        result, reports = run_suite(pytester, inv, "-k", "health", "--revalidate")
        cases = junit_cases(reports)
        assert sorted(cases) == ["h2", "h3"]
        assert cases["h2"]["health"] == ("passed", "")
        assert cases["h3"]["health"][0] == "failure"
        # The drained node is re-tested inside a reservation of the run's own.
        salloc = calls(log, "salloc")[-1]
        assert option(salloc["argv"], "nodelist") == "h2"
        assert option(salloc["argv"], "reservation").startswith("burnin-")
        # The next run starts on nodes Slurm says are free, not after some sleep.
        assert jobs_left(cluster) == "", "a run ends only when Slurm has its allocation back"
        if clean == 1:
            assert cluster.state("h2") == ("drained", "burnin: failed health")
    assert cluster.state("h2")[0] == "idle", "released and resumed"
    assert cluster.state("h3") == ("drained", "admin: fan replaced")
    ledger = Ledger(pytester.path / "ledger.db")
    assert ledger.quarantined() == {"h3"}
    assert [h["event"] for h in ledger.history("h2")] == [
        "quarantined", "action", "clean", "released", "action"]
    reservations = subprocess.run(["scontrol", "show", "reservation"], capture_output=True,
                                  text=True, env=cluster.env(), timeout=30).stdout
    assert "burnin-" not in reservations, "re-test reservations must be deleted"
