"""A node's own evidence and an incident's hold, end to end on real processes (local
transport): the suite runs, the gate decides, the ledger and `burnin admit` are read back.

Ten local nodes, three of them with a faulty GEMM planted below the real sdc probe
(tests/test_sdc.py's FAULTY_TORCH): three of ten is more than the shared-cause fraction,
yet each node's wrong products are its own, so all three are quarantined and there is no
incident. Then an incident that a later run does not pass keeps its nodes out of
admission until `burnin incident close` (docs/operator/incidents.md)."""

from __future__ import annotations

import json
import sys
import textwrap

from support.incli import burnin as cli
from support.replay import replay_python
from support.suiterun import junit_cases, run_suite, script
from test_sdc import FAULTY_TORCH

from burnin.ledger.api import Ledger


def test_three_of_ten_with_their_own_wrong_gemm_are_quarantined_not_an_incident(pytester):
    faulty = pytester.path / "faulty"
    faulty.mkdir()
    (faulty / "sitecustomize.py").write_text(FAULTY_TORCH)
    wrapper = script(pytester.path / "python-faulty",
                     f"PYTHONPATH={faulty} exec {sys.executable} \"$@\"\n")
    replay = replay_python(pytester.path / "replay")
    Ledger(pytester.path / "ledger.db")
    inv = pytester.path / "inv.yaml"
    # The faulty three share a batch label (bought together): no component, whatever fails.
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        cluster: ten
        defaults: {{transport: local, gpus: 0, python: {replay}}}
        checks:
          sdc: {{n: 128, duration_s: 1, random_repeats: 2, verify_every: 1}}
        nodes:
          - name: n[01-07]
            labels: {{batch: b1, rack: r1}}
          - name: n[08-10]
            python: {wrapper}
            labels: {{batch: b2, rack: r1}}
        quarantine:
          ledger: {json.dumps(str(pytester.path / 'ledger.db'))}
        """))
    result, reports = run_suite(pytester, inv, "-k", "sdc")
    assert result.ret == 1
    cases = junit_cases(reports)
    for n in range(1, 8):
        assert cases[f"n{n:02d}"]["sdc"] == ("passed", ""), cases[f"n{n:02d}"]
    for node in ("n08", "n09", "n10"):
        outcome, message = cases[node]["sdc"]
        assert outcome == "failure" and "wrong elements" in message, (node, message)
        assert "shared cause" not in message, message
    ledger = Ledger(pytester.path / "ledger.db")
    assert ledger.quarantined() == {"n08", "n09", "n10"}
    assert ledger.incidents() == []
    assert "INCIDENT" not in result.stdout.str()


def test_an_open_incident_holds_its_nodes_across_a_later_run_until_a_person_closes_it(
        pytester):
    replay = replay_python(pytester.path / "replay")
    Ledger(pytester.path / "ledger.db")
    inv = pytester.path / "inv.yaml"

    def inventory(floor: float) -> str:
        inv.write_text(textwrap.dedent(f"""\
            version: 1
            cluster: six
            defaults: {{transport: local, gpus: 0, python: {replay}}}
            nodes:
              - name: n[1-6]
            checks:
              storage: {{size_gb: 0.01, streams: 1, min_read_gbps_per_gpu: {floor}}}
            quarantine:
              ledger: {json.dumps(str(pytester.path / 'ledger.db'))}
            """))
        return str(inv)

    # Run 1: a storage floor no node meets, one incident of all six.
    run_suite(pytester, inventory(1e6), "-k", "health or storage")
    ledger = Ledger(pytester.path / "ledger.db")
    (kept,) = ledger.incidents(still_open=True)
    number = kept.incident.id
    assert ledger.quarantined() == set()
    # Run 2 does not include storage: its report passes every node it ran...
    result, reports = run_suite(pytester, inventory(1e6), "-k", "health")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"OPEN incident {number} of run {kept.run_id} still open "
                                 "(storage on 6 of 6)*: n1, n2, n3, n4, n5, n6"])
    junit = str(reports / "latest" / "junit.xml")
    assert json.loads(cli("admit", junit, "--json", "--require", "health").stdout
                      )["rejected"] == {}
    # ... but the ledger holds them: admission with the inventory refuses all six
    held = cli("admit", junit, "--inventory", str(inv), "--json", "--require", "health")
    assert held.returncode == 1, held.stderr
    rejected = json.loads(held.stdout)["rejected"]
    assert sorted(rejected) == [f"n{i}" for i in range(1, 7)]
    assert f"incident {number} of run {kept.run_id} still open" in rejected["n3"][0]
    # and the later run still shows it, in summary.html and metrics.prom
    assert f"incident {number} of run {kept.run_id} still open" in (
        reports / "latest" / "summary.html").read_text()
    assert f'burnin_incident_open_nodes{{cluster="six",incident="{number}",' \
        'check="storage"} 6' in (reports / "latest" / "metrics.prom").read_text()
    listed = cli("incident", "list", "--inventory", str(inv))
    assert listed.returncode == 0 and f"incident {number}  run {kept.run_id}" in listed.stdout
    # A person closes it: the same report admits them all
    wrong = cli("incident", "close", "99", "--reason", "x", "--inventory", str(inv))
    assert wrong.returncode == 2 and "no incident 99" in wrong.stderr
    closed = cli("incident", "close", str(number), "--reason", "NFS server fixed",
                 "--who", "alice", "--inventory", str(inv))
    assert closed.returncode == 0, closed.stderr
    assert cli("admit", junit, "--inventory", str(inv), "--require", "health").returncode == 0
    assert ledger.incidents(still_open=True) == []
    assert any(h["event"] == "incident-closed" and h["who"] == "alice"
               for h in ledger.history("n1"))
    again = cli("incident", "close", str(number), "--reason", "x", "--inventory", str(inv))
    assert again.returncode == 2 and "closed already by alice" in again.stderr


def test_a_later_run_that_passes_all_its_nodes_closes_the_incident(pytester):
    replay = replay_python(pytester.path / "replay")
    Ledger(pytester.path / "ledger.db")
    inv = pytester.path / "inv.yaml"
    for floor in (1e6, 0.001):
        inv.write_text(textwrap.dedent(f"""\
            version: 1
            defaults: {{transport: local, gpus: 0, python: {replay}}}
            nodes:
              - name: n[1-4]
            checks:
              storage: {{size_gb: 0.01, streams: 1, min_read_gbps_per_gpu: {floor}}}
            quarantine:
              ledger: {json.dumps(str(pytester.path / 'ledger.db'))}
            """))
        _, reports = run_suite(pytester, inv, "-k", "storage")
        if floor > 1:
            assert len(Ledger(pytester.path / "ledger.db").incidents(still_open=True)) == 1
    ledger = Ledger(pytester.path / "ledger.db")
    assert ledger.incidents(still_open=True) == []
    (kept,) = ledger.incidents()
    assert "burnin_incident_open_nodes" not in (reports / "latest" / "metrics.prom").read_text()
    admitted = cli("admit", str(reports / "latest" / "junit.xml"), "--inventory", str(inv),
                   "--require", "storage")
    assert admitted.returncode == 0, admitted.stdout + admitted.stderr
    assert any(h["event"] == "incident-closed" and "passed all its nodes" in h["why"]
               for h in ledger.history("n2"))
