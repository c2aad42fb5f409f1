"""Shared-cause incidents end to end, on real processes (local transport): the suite runs,
the gate decides, junit.xml, the ledger, the hooks and `burnin admit` are read back."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from support.replay import replay_python
from support.suiterun import junit_cases, run_suite, script

from burnin.ledger.api import Ledger


def six_nodes(pytester, floor: float, extra: str = "") -> Path:
    """n1..n6 replaying the real probes' documents; n6's health probe fails on its own
    (its python exits for the health probe only); a storage floor of `floor` GB/s; a
    quarantine hook and an incident hook that log their argv."""
    replay = replay_python(pytester.path / "replay")
    script(pytester.path / "py6", "case \"$*\" in *health*) echo 'GPU fell off the bus' >&2; "
                                  f"exit 3;; esac\nexec {replay} \"$@\"\n")
    hook = script(pytester.path / "hook.sh",
                  f"printf '%s|' \"$@\" >> {pytester.path / 'hook.log'}\n"
                  f"echo >> {pytester.path / 'hook.log'}\n")
    pager = script(pytester.path / "page.sh",
                   f"printf '%s|' \"$@\" >> {pytester.path / 'page.log'}\n"
                   f"echo >> {pytester.path / 'page.log'}\n")
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        cluster: six
        defaults: {{transport: local, gpus: 0, python: {replay}}}
        nodes:
          - name: n[1-5]
          - name: n6
            python: {pytester.path / 'py6'}
        checks:
          storage: {{size_gb: 0.01, streams: 1, min_read_gbps_per_gpu: {floor}}}
        quarantine:
          ledger: {json.dumps(str(pytester.path / 'ledger.db'))}
          actions: [command]
          command: [{hook}, "{{node}}", "{{checks}}"]
          incident_command: [{pager}, "{{run}}", "{{check}}", "{{nodes}}", "{{message}}"]
        """) + extra)
    return inv


def lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [ln.rstrip("|").split("|") for ln in path.read_text().splitlines() if ln]


def test_a_floor_no_node_meets_is_one_incident_and_nobody_is_quarantined_for_it(pytester):
    Ledger(pytester.path / "ledger.db")
    inv = six_nodes(pytester, floor=1e6)
    result, reports = run_suite(pytester, inv, "-k", "health or storage")
    assert result.ret == 1
    cases = junit_cases(reports)
    for node in ("n1", "n2", "n3", "n4", "n5", "n6"):
        outcome, message = cases[node]["storage"]
        assert outcome == "failure", (node, outcome)  # kept out of admission
        assert message.startswith("shared cause suspected: storage failed on 6 of 6 nodes"), \
            message
        assert "below" in message or "floor" in message, message  # the judge's words follow
    ledger = Ledger(pytester.path / "ledger.db")
    # n6's own fault in another check: quarantined for that, and only for that
    assert ledger.quarantined() == {"n6"}
    assert tuple(ledger.get("n6").checks) == ("health",)
    assert lines(pytester.path / "hook.log") == [["n6", "health"]]
    (kept,) = ledger.incidents()
    assert kept.incident.check == "storage" and len(kept.incident.nodes) == 6
    run_id = (reports / "latest").resolve().name
    assert kept.run_id == run_id
    (paged,) = lines(pytester.path / "page.log")  # once for the incident, never per node
    assert paged[:3] == [run_id, "storage", "n1,n2,n3,n4,n5,n6"]
    assert paged[3].startswith("shared cause suspected")
    result.stdout.fnmatch_lines(["INCIDENT shared cause suspected: storage failed on 6 of 6*",
                                 "*not quarantined, no action taken*",
                                 "quarantined: n6"])
    # summary.html: the incident is the first thing on the page, before the verdict
    page = (reports / "latest" / "summary.html").read_text()
    assert "Shared-cause incidents" in page
    body = page[page.index("<body>"):]
    first = body.index("shared cause suspected: storage failed on 6 of 6")
    assert first < body.index("Written ") < body.index("id='verdict'")
    metrics = (reports / "latest" / "metrics.prom").read_text()
    assert 'burnin_incident_nodes{cluster="six",check="storage",rule="fraction",' \
        'component=""} 6' in metrics
    assert 'burnin_node_quarantined{cluster="six",node="n1"} 0' in metrics
    # `burnin rejudge` finds the same verdicts, the incident's words included
    same = cli("rejudge", str((reports / "latest").resolve()))
    assert same.returncode == 0, same.stdout + same.stderr
    # `burnin report` draws the same again from the run directory
    again = cli("report", str((reports / "latest").resolve()))
    assert again.returncode == 0, again.stderr
    assert "Shared-cause incidents" in (reports / "latest" / "summary.html").read_text()
    # no repeat-offender count grows: the history holds n6's quarantine and nothing else
    for node in ("n1", "n2", "n3", "n4", "n5"):
        assert ledger.history(node) == []
    admitted = subprocess.run([sys.executable, "-m", "burnin", "admit",
                               str(reports / "latest" / "junit.xml"), "--json",
                               "--require", "storage"],
                              capture_output=True, text=True, timeout=60)
    assert admitted.returncode == 1, admitted.stderr
    verdict = json.loads(admitted.stdout)
    assert verdict["admitted"] == [] and len(verdict["rejected"]) == 6, verdict


def test_a_floor_some_nodes_meet_blames_each_failing_node(pytester):
    # The same run with a floor every node meets, but n6 failing health: no incident.
    Ledger(pytester.path / "ledger.db")
    inv = six_nodes(pytester, floor=0.001)
    result, reports = run_suite(pytester, inv, "-k", "health or storage")
    assert "INCIDENT" not in result.stdout.str()
    assert Ledger(pytester.path / "ledger.db").incidents() == []
    assert lines(pytester.path / "page.log") == []
    assert junit_cases(reports)["n1"]["storage"][0] == "passed"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "burnin", *args], capture_output=True,
                          text=True, timeout=60)


def test_history_shows_the_incident_and_a_person_quarantines_its_nodes_by_hand(pytester):
    Ledger(pytester.path / "ledger.db")
    inv = six_nodes(pytester, floor=1e6)
    _, reports = run_suite(pytester, inv, "-k", "storage")
    run_id = (reports / "latest").resolve().name
    shown = cli("history", "n2", "--inventory", str(inv))
    assert shown.returncode == 0, shown.stderr
    assert f"incident       run {run_id}: shared cause suspected: storage failed on 6 of 6" \
        in shown.stdout, shown.stdout
    assert json.loads(cli("history", "n2", "--inventory", str(inv), "--json").stdout
                      )["nodes"][0]["incidents"][0]["check"] == "storage"
    ledger = Ledger(pytester.path / "ledger.db")
    assert ledger.quarantined() == set()
    wrong = cli("quarantine", "add", "--run", run_id, "--check", "sdc", "--reason", "x",
                "--inventory", str(inv))
    assert wrong.returncode == 2 and "no incident of sdc" in wrong.stderr
    stranger = cli("quarantine", "add", "n[1-9]", "--run", run_id, "--check", "storage",
                   "--reason", "x", "--inventory", str(inv))
    assert stranger.returncode == 2 and "not in the incident: n[7-9]" in stranger.stderr
    some = cli("quarantine", "add", "n[1-2]", "--run", run_id, "--check", "storage",
               "--reason", "their disks after all", "--inventory", str(inv))
    assert some.returncode == 0, some.stderr
    assert ledger.quarantined() == {"n1", "n2"}
    assert "their disks after all (incident of run" in ledger.get("n1").reasons[0]
    # the inventory's quarantine.actions for the nodes a person quarantined
    assert lines(pytester.path / "hook.log") == [["n1"], ["n2"]]
    every = cli("quarantine", "add", "--run", run_id, "--check", "storage",
                "--reason", "all of them", "--inventory", str(inv))
    assert every.returncode == 0, every.stderr
    assert ledger.quarantined() == {f"n{i}" for i in range(1, 7)}
