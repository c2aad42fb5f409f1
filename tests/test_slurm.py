"""The srun transport and the Slurm actions on a real Slurm test cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.replay import replay_python
from support.slurmcluster import calls, logged_commands, option
from support.suiterun import TINY_MEMORY, junit_cases, run_suite, script

from burnin.gate.actions import REASON_MAX, drain_reason
from burnin.ledger.api import Ledger

# Real SSH hosts or a real Slurm cluster, or a benchmark: minutes, not seconds. CI runs
# them all; `-m "not slow"` leaves them out of a developer's quick run.
pytestmark = pytest.mark.slow

TINY = {"sdc": {"duration_s": 0.2, "n": 64, "random_repeats": 2}, "memory": TINY_MEMORY,
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
    # Healthy nodes replay the real probes' recorded documents (tests/support/replay.py): what is
    # tested is Slurm's drain, admission and resume.
    replay = replay_python(pytester.path / "replay")

    def h2_python(healthy: bool) -> None:
        script(py, f"exec {replay} \"$@\"\n" if healthy else
               "echo 'GPU has fallen off the bus' >&2\nexit 3\n")

    h2_python(healthy=False)
    inv = slurm_inventory(cluster, pytester.path / "inv.yaml", nodes={"h2": {"python": str(py)}},
                          defaults={"python": replay},
                          quarantine={"ledger": str(pytester.path / "ledger.db"),
                                      "actions": ["slurm"]})
    cluster.scontrol("update", "nodename=h3", "state=drain", "reason=admin: fan replaced")
    Ledger(pytester.path / "ledger.db")  # burnin ledger init: a run never creates one

    result, reports = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=1, failed=2)
    cases = junit_cases(reports)
    assert "Slurm cannot give node h3" in cases["h3"]["health"][1]
    # sinfo -R shows what failed and why, under burnin's own prefix.
    drained = cluster.state("h2")
    assert drained[0] == "drained"
    assert drained[1].startswith("burnin: failed health; probe health exited with status 3")
    assert cluster.state("h3") == ("drained", "admin: fan replaced")
    result.stdout.fnmatch_lines(["*slurm on h3: already drained by someone else*"])

    # A `-k health` run: the gate requires every applicable check unless told otherwise.
    admit = subprocess.run([sys.executable, "-m", "burnin", "admit", "--require", "health",
                            str(reports / "latest" / "junit.xml")], capture_output=True,
                           text=True, timeout=60)
    assert admit.returncode == 1
    assert "admitted (1): h1" in admit.stdout and "  h2: health: failure:" in admit.stdout
    (first,) = calls(log, "salloc")
    assert option(first["argv"], "nodelist") == "h[1-2]" and "--reservation" not in str(first)
    assert jobs_left(cluster) == "", "a run ends only when Slurm has its allocation back"

    # By hand: the inventory's actions drain the node with the operator's reason, made one
    # safe line (quotes, $(), backquotes, a newline); releasing it resumes it.
    def quarantine(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "burnin", "quarantine", *args,
                               "--inventory", str(inv), "--who", "ann"], capture_output=True,
                              text=True, env=cluster.env(), timeout=60)
    res = quarantine("add", "h1", "--reason", 'PSU "B" hums $(reboot) `id` & <loud>\nRMA 7')
    assert res.returncode == 0, res.stdout + res.stderr
    assert cluster.state("h1") == ("drained",
                                   "burnin: by hand (ann): PSU B hums (reboot) id loud RMA 7")
    res = quarantine("release", "h1", "--reason", "PSU replaced")
    assert res.returncode == 0, res.stdout + res.stderr
    assert cluster.state("h1")[0] == "idle", "burnin resumes a drain it recognises as its own"

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
            assert cluster.state("h2") == drained
    assert cluster.state("h2")[0] == "idle", "released and resumed"
    assert cluster.state("h3") == ("drained", "admin: fan replaced")
    ledger = Ledger(pytester.path / "ledger.db")
    assert ledger.quarantined() == {"h3"}
    assert [h["event"] for h in ledger.history("h2")] == [
        "quarantined", "action", "clean", "released", "action"]
    reservations = subprocess.run(["scontrol", "show", "reservation"], capture_output=True,
                                  text=True, env=cluster.env(), timeout=30).stdout
    assert "burnin-" not in reservations, "re-test reservations must be deleted"


BURN = ("burn: cuda:1 (NVIDIA H100 80GB HBM3): 412.3 TFLOPS, below the floor of 600 TFLOPS; "
        "cuda:2 (NVIDIA H100 80GB HBM3): XID 79 at 12 s into the burn")
SDC = "sdc: cuda:3: known-answer bf16 product #7: 3 wrong elements, expected exact sums"


@pytest.mark.parametrize("checks,reasons,expected", [
    (["burn"], [BURN], "burnin: failed burn; cuda:1 (NVIDIA H100 80GB HBM3): 412.3 TFLOPS, "
                       "below the floor of 600 TFLOPS; cuda:2 (NVIDIA H100 80GB HBM3): XID 79 "
                       "at 12 s into the burn"),
    (["burn", "sdc"], [BURN, SDC], None),
    (["health", "sdc", "burn"], ["health: " + "x" * 500, "sdc: cpu:0: 3 wrong elements",
                                 "burn: " + "y" * 300], None),
    (["health"], ['health: "$(rm -rf /)" `id` \\ | & > <\nnext line\x1b[31m'], None),
    ([], ["quarantined by hand by ann: PSU fan noisy"],
     "burnin: quarantined by hand by ann: PSU fan noisy"),
], ids=["one-check", "two-checks", "long", "hostile", "by-hand"])
def test_drain_reason_is_one_safe_line_with_the_detail(checks, reasons, expected):
    reason = drain_reason(checks, reasons)
    assert reason.startswith("burnin: "), "burnin recognises its own drains by the prefix"
    assert len(reason) <= REASON_MAX
    assert set(reason) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                              "0123456789 ._:,;/+-%@()#="), reason
    if expected:
        assert reason == expected
    if checks:
        assert reason.startswith(f"burnin: failed {','.join(checks)}")
    if "sdc" in checks:
        assert ("sdc: cuda:3: known-answer bf16 product #7: 3 wrong elements" in reason
                or "; sdc: cpu:0: 3 wrong elements; " in reason), "a short message stays whole"
    if len(checks) == 3:
        assert "; health: xxx" in reason and "; burn: yyy" in reason and reason.endswith("...")
    if "burn" in checks and len(checks) == 2:
        assert "burn: cuda:1 (NVIDIA H100 80GB HBM3): 412.3 TFLOPS, below the floor of 600 " \
               "TFLOPS" in reason
