"""The srun transport and the Slurm actions on a real Slurm test cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from suiterun import CHECKS, TINY_MEMORY, junit_cases, run_suite, script

from burnin.ledger import Ledger

TINY = {"sdc": {"duration_s": 0.2, "n": 64, "random_repeats": 2}, "memory": TINY_MEMORY,
        # The hosts share this machine's cores: peers are not independent here.
        "burn": {"duration_s": 1, "n": 128, "sample_s": 0.25, "peer_fraction": 0},
        "storage": {"size_gb": 0.02, "streams": 2, "stream_fraction": 0},
        "allreduce": {"max_bytes": 262144, "seconds_per_size": 0.02, "peer_fraction": 0,
                      "pair_fraction": 0}}


def slurm_inventory(cluster, path: Path, nodes: dict | None = None, **extra) -> Path:
    doc = cluster.hosts.inventory(transport="srun",
                                  workdir=str(cluster.hosts.workdir / "remote"))
    doc["defaults"]["srun"] = {"partition": "test"}
    doc["defaults"]["ssh"] = {"connect_timeout_s": 3}  # srun's --immediate
    for entry in doc["nodes"]:
        entry.update((nodes or {}).get(entry["name"], {}))
    doc.update(extra)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_the_whole_suite_through_srun(pytester, make_slurm):
    cluster = make_slurm(4)
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml", checks=TINY)
    result, reports = run_suite(pytester, inv)
    result.assert_outcomes(passed=4 * len(CHECKS))
    passed = ("passed", "")
    assert junit_cases(reports) == {h.name: dict.fromkeys(CHECKS, passed)
                                    for h in cluster.hosts.hosts}
    health = [json.loads(ln) for ln in (reports / "latest" / "results.jsonl").open()
              if '"check": "health"' in ln]
    # Each probe ran in its node's namespaces, through a Slurm job step.
    assert {r["node"]: r["data"]["node"]["hostname"] for r in health} == {
        h.name: h.name for h in cluster.hosts.hosts}
    assert list((cluster.hosts.workdir / "remote").iterdir()) == [], "probes left behind"


def test_drain_admit_revalidate_resume_and_an_administrators_drain_stays(pytester,
                                                                         make_slurm):
    cluster = make_slurm(3)
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

    admit = subprocess.run([sys.executable, "-m", "burnin.cli", "admit",
                            str(reports / "latest" / "junit.xml")], capture_output=True,
                           text=True, timeout=60)
    assert admit.returncode == 1
    assert "admitted (1): h1" in admit.stdout and "  h2: health: failure:" in admit.stdout

    h2_python(healthy=True)  # repaired
    for clean in (1, 2):
        result, reports = run_suite(pytester, inv, "-k", "health", "--revalidate")
        cases = junit_cases(reports)
        assert sorted(cases) == ["h2", "h3"]
        assert cases["h2"]["health"] == ("passed", "")
        assert cases["h3"]["health"][0] == "failure"
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
