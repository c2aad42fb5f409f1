"""`burnin admit` against doctored reports, and the quarantine gate end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support.incli import burnin
from support.replay import replay_python
from support.suiterun import junit_cases, run_suite, script, trio_inventory

from burnin.ledger.api import Ledger


def junit(*suites: str) -> str:
    return "<?xml version='1.0'?>\n<testsuites>" + "".join(suites) + "</testsuites>"


# What burnin writes on every testsuite; these reports' inventory required health and
# sdc (admission.require), so the cases below need only those two checks.
PROPS = {"cluster": "c", "run_id": "r1", "burnin_report": "1", "complete": "true",
         "nodes_in_run": "2", "gpus": "0", "admission_require": "health,sdc"}


def suite(node: str, *cases: str, **props: str) -> str:
    merged = {k: v for k, v in {**PROPS, **props}.items() if v is not None}
    properties = "".join(f'<property name="{k}" value="{v}"/>' for k, v in merged.items())
    return (f'<testsuite name="{node}"><properties>{properties}</properties>' + "".join(cases)
            + "</testsuite>")


def ok(check: str) -> str:
    return f'<testcase name="{check}"/>'


def bad(check: str, tag: str, message: str = "why") -> str:
    return f'<testcase name="{check}"><{tag} message="{message}"/></testcase>'


GOOD = junit(suite("n1", ok("health"), ok("sdc")), suite("n2", ok("health"), ok("sdc")))
EVERY = ("health", "fabric", "pcie", "gpupairs", "memory", "dcgm", "sdc", "burn", "storage",
         "allreduce", "collectives", "train", "hca", "allreduce_internode", "collectives_internode",
         "train_internode")
CPU_ONLY = tuple(c for c in EVERY if c not in ("pcie", "gpupairs", "dcgm", "hca"))
HEALTH_ONLY = junit(*(suite(n, ok("health"), admission_require=None) for n in ("n1", "n2")))
FULL = junit(*(suite(n, *map(ok, EVERY), admission_require=None) for n in ("n1", "n2")))
PYTEST_OWN = junit('<testsuite name="pytest"><testcase classname="suites.test_health" '
                   'name="test_health[n1]"/></testsuite>')

# (id, report text, extra args, exit code, {rejected node: reason fragment})
DOCTORED = [
    ("all-passed", GOOD, [], 0, {}),
    ("failure", junit(suite("n1", ok("health"), bad("sdc", "failure", "GPU 3 wrong")),
                      suite("n2", ok("health"), ok("sdc"))), [], 1,
     {"n1": "sdc: failure: GPU 3 wrong"}),
    ("error", junit(suite("n1", bad("health", "error"), ok("sdc")),
                    suite("n2", ok("health"), ok("sdc"))), [], 1, {"n1": "health: error"}),
    ("skipped", junit(suite("n1", ok("health"), bad("sdc", "skipped", "in quarantine")),
                      suite("n2", ok("health"), ok("sdc"))), [], 1,
     {"n1": "sdc: skipped: in quarantine"}),
    ("missing-testcase", junit(suite("n1", ok("health")), suite("n2", ok("health"), ok("sdc"))),
     [], 1, {"n1": "sdc: no testcase"}),
    ("duplicate-testcase", junit(suite("n1", ok("health"), ok("sdc"), ok("sdc")),
                                 suite("n2", ok("health"), ok("sdc"))), [], 1,
     {"n1": "sdc: 2 testcases, expected one"}),
    ("duplicate-testsuite", junit(suite("n1", ok("health"), ok("sdc")),
                                  suite("n1", bad("sdc", "failure")),
                                  suite("n2", ok("health"), ok("sdc"))), [], 1,
     {"n1": "sdc: 2 testcases"}),
    ("missing-node", GOOD, ["--inventory", "{inv}"], 1, {"n3": "no testsuite in the report"}),
    ("require-absent-check", GOOD, ["--require", "health,burn"], 1,
     {"n1": "burn: no testcase", "n2": "burn: no testcase"}),
    ("require-subset", junit(suite("n1", ok("health"), bad("sdc", "failure")),
                             suite("n2", ok("health"))), ["--require", "health"], 0, {}),
    # The gate's defaults: the full suite that applies, whatever the run was asked to run.
    ("partial-run-admits-nobody", HEALTH_ONLY, [], 1,
     {"n1": "sdc: no testcase", "n2": "allreduce_internode: no testcase"}),
    ("partial-run-with-require-health", HEALTH_ONLY, ["--require", "health"], 0, {}),
    ("full-suite-on-cpu-nodes", FULL, [], 0, {}),
    ("a-lone-node-needs-no-internode", junit(suite("n1", *map(ok, EVERY[:-1]), nodes_in_run="1",
                                                   admission_require=None)), [], 0, {}),
    # Both nodes passed every check a CPU node needs; the one whose GPU count the run never
    # learned is held to the GPU checks too (pcie, dcgm), which it lacks.
    ("unknown-gpu-count-requires-everything", junit(
        suite("n1", *map(ok, CPU_ONLY), gpus="unknown", admission_require=None),
        suite("n2", *map(ok, CPU_ONLY), admission_require=None)), [], 1,
     {"n1": "pcie: no testcase"}),
    ("inventory-require-wins-over-the-table", HEALTH_ONLY, ["--inventory", "{inv_require}"], 0,
     {}),
    # Only a complete report burnin wrote is the admission contract.
    ("pytest-own-junitxml", PYTEST_OWN, [], 2, {}),
    ("no-burnin-properties", junit('<testsuite name="n1"><testcase name="health"/>'
                                   '</testsuite>'), [], 2, {}),
    ("interrupted-run", junit(suite("n1", ok("health"), ok("sdc"), complete="false"),
                              suite("n2", ok("health"), ok("sdc"), complete="false")), [], 2, {}),
    ("no-run-id", junit(suite("n1", ok("health"), ok("sdc"), run_id=None)), [], 2, {}),
    ("mixed-runs", junit(suite("n1", ok("health"), ok("sdc")),
                         suite("n2", ok("health"), ok("sdc"), run_id="r2")), [], 2, {}),
    ("unknown-required-check", GOOD, ["--require", "health,helth"], 2, {}),
    ("truncated-xml", GOOD[:-40], [], 2, {}),
    ("empty-file", "", [], 2, {}),
    ("not-junit", "<html><body/></html>", [], 2, {}),
    ("no-testsuite", "<testsuites/>", [], 2, {}),
    ("no-testcase", junit(suite("n1"), suite("n2")), [], 2, {}),
    ("nameless-suite", junit('<testsuite><testcase name="health"/></testsuite>'), [], 2, {}),
]


def admit(report: Path, *args: str) -> subprocess.CompletedProcess:
    """`burnin admit` as the gate runs it: the real entry point, in its own process."""
    return subprocess.run([sys.executable, "-m", "burnin", "admit", str(report), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("text,args,code,rejected", [d[1:] for d in DOCTORED],
                         ids=[d[0] for d in DOCTORED])
def test_doctored_reports(tmp_path, text, args, code, rejected):
    report = tmp_path / "junit.xml"
    report.write_text(text)
    # An inventory's ledger is read too (a node in quarantine is refused): empty here.
    ledger = Ledger(tmp_path / "ledger.db").path
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"version: 1\nnodes:\n  - name: n[1-3]\nquarantine: {{ledger: {ledger}}}\n")
    inv_require = tmp_path / "inv-require.yaml"
    inv_require.write_text("version: 1\nnodes:\n  - name: n[1-2]\n"
                           f"admission: {{require: [health]}}\nquarantine: {{ledger: {ledger}}}\n")
    args = [a.replace("{inv}", str(inv)).replace("{inv_require}", str(inv_require))
            for a in args]
    # In this process (tests/support/incli.py): the verdict is the claim; a traceback
    # would fail the test as it is raised. test_plain_output_... runs the entry point.
    res = burnin("admit", str(report), *args, "--json")
    assert res.returncode == code, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    if code == 2:
        assert "no node is admitted" in res.stderr
        assert not (tmp_path / "admitted.txt").exists()
        return
    out = json.loads(res.stdout)
    assert set(out["rejected"]) == set(rejected)
    for node, fragment in rejected.items():
        assert any(fragment in r for r in out["rejected"][node]), out["rejected"][node]
    admitted = (tmp_path / "admitted.txt").read_text().split()
    assert admitted == out["admitted"]
    assert not set(admitted) & set(rejected)


def test_plain_output_names_the_rejected_and_their_reasons(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(DOCTORED[1][1])
    res = admit(report, "--admitted-file", str(tmp_path / "out.txt"))
    assert res.returncode == 1
    assert "admitted (1): n2" in res.stdout
    assert "  n1: sdc: failure: GPU 3 wrong" in res.stdout
    assert (tmp_path / "out.txt").read_text() == "n2\n"


def gate_inventory(pytester, body: str = "") -> Path:
    """n1, n2 and n3 (whose python python3() makes healthy or broken); their probes replay
    the real ones' recorded documents (tests/support/replay.py): the gate is what is tested."""
    return trio_inventory(pytester, pytester.path / "inv.yaml",
                          textwrap.indent(textwrap.dedent(body), "  "))  # under quarantine:


def python3(pytester, healthy: bool) -> None:
    replay = replay_python(pytester.path / "replay")
    script(pytester.path / "py3", f"exec {replay} \"$@\"\n" if healthy
           else "echo 'GPU fell off the bus' >&2\nexit 3\n")


def test_fail_quarantine_skip_revalidate_release(pytester):
    hook_log = pytester.path / "hook.log"
    hook = script(pytester.path / "hook.sh",
                  f"printf '%s|' \"$@\" >> {hook_log}\necho >> {hook_log}\n")
    inv = gate_inventory(pytester, f"""\
          actions: [command]
          command: [{hook}, "node={{node}}", "{{checks}}", "{{reason}}"]
        """)
    ledger = Ledger(pytester.path / "ledger.db")
    python3(pytester, healthy=False)
    result, reports = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["quarantined: n3", "command on n3: hook ran"])
    assert ledger.quarantined() == {"n3"}
    args = hook_log.read_text().strip().split("|")
    assert args[:2] == ["node=n3", "health"] and "GPU fell off the bus" in args[2]

    result, reports = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["skipped for quarantine: n3 (re-test with --revalidate*"])
    outcome, message = junit_cases(reports)["n3"]["health"]
    assert outcome == "skipped" and "in quarantine since run" in message

    python3(pytester, healthy=True)  # repaired
    for expected in ("n3: clean re-validation run 1 of 2", "released from quarantine: n3"):
        result, reports = run_suite(pytester, inv, "-k", "health", "--revalidate")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines([expected])
        assert list(junit_cases(reports)) == ["n3"]
    assert ledger.quarantined() == set()
    result, _ = run_suite(pytester, inv, "-k", "health", "--revalidate")
    assert result.ret == 0, "nothing to re-validate is not an error"


def test_a_failing_action_is_reported_and_the_entry_kept(pytester):
    inv = gate_inventory(pytester, """\
          actions: [command]
          command: [/bin/false]
        """)
    python3(pytester, healthy=False)
    result, _ = run_suite(pytester, inv, "-k", "health")
    result.stdout.fnmatch_lines(["quarantined: n3", "command on n3: hook failed: *"])
    ledger = Ledger(pytester.path / "ledger.db")
    assert ledger.quarantined() == {"n3"}
    assert ledger.history("n3")[-1]["event"] == "action-failed"


def test_no_quarantine_is_a_dry_run(pytester):
    inv = gate_inventory(pytester)
    python3(pytester, healthy=False)
    result, _ = run_suite(pytester, inv, "-k", "health", "--no-quarantine")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["would be quarantined (--no-quarantine): n3"])
    assert Ledger(pytester.path / "ledger.db").quarantined() == set()


def test_quarantine_cli_list_show_release(pytester):
    inv = gate_inventory(pytester)
    python3(pytester, healthy=False)
    _, reports = run_suite(pytester, inv, "-k", "health")
    # metrics.prom exports the ledger as it stands at the end of the run.
    metrics = (reports / "latest" / "metrics.prom").read_text()
    assert 'burnin_node_quarantined{cluster="inv",node="n3"} 1' in metrics
    assert 'burnin_node_quarantined{cluster="inv",node="n1"} 0' in metrics

    def cli(*args):  # in this process (tests/support/incli.py) but the first: what it says
        return burnin("quarantine", "--inventory", str(inv), *args)
    # The entry point, in its own process, once.
    listed = subprocess.run([sys.executable, "-m", "burnin", "quarantine", "--inventory",
                             str(inv), "list"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and listed.stdout.startswith("n3  since ")
    assert "1 node(s) in quarantine" in listed.stdout
    shown = cli("show", "n3")
    assert "health: probe health exited with status 3" in shown.stdout
    released = cli("release", "n3", "--reason", "PSU replaced", "--who", "bob")
    assert released.returncode == 0, released.stderr
    assert "released       by bob: PSU replaced" in cli("show", "n3").stdout
    assert cli("release", "n3", "--reason", "x").returncode == 1


def test_a_node_failed_in_three_real_runs_is_a_repeat_offender_held_for_a_person(pytester):
    """n3 fails three real runs, released by clean re-validation after each of the first two
    (release_after 1); the third makes it a repeat offender (3 times in 30 days, the
    default): clean re-validation runs no longer release it, the page and junit.xml name
    it, and `burnin history` shows its runs and why it is held."""
    inv = gate_inventory(pytester, "release_after: 1\n")
    ledger = Ledger(pytester.path / "ledger.db")
    for time_ in range(1, 4):
        python3(pytester, healthy=False)
        result, _ = run_suite(pytester, inv, "-k", "health")
        result.assert_outcomes(passed=2, failed=1)
        assert ledger.quarantined() == {"n3"}
        python3(pytester, healthy=True)
        result, reports = run_suite(pytester, inv, "-k", "health", "--revalidate")
        result.assert_outcomes(passed=1)
        if time_ < 3:
            result.stdout.fnmatch_lines(["released from quarantine: n3"])
            assert ledger.quarantined() == set()
    result.stdout.fnmatch_lines(["n3: clean re-validation run 1 of 1; held for a person: a "
                                 "repeat offender or quarantined by hand*"])
    assert ledger.quarantined() == {"n3"}
    run_dir = (reports / "latest").resolve()
    props = {s.get("name"): {p.get("name"): p.get("value") for p in s.iter("property")}
             for s in ET.parse(run_dir / "junit.xml").getroot().iter("testsuite")}
    assert props["n3"]["repeat_offender"] == "quarantined 3 times in 30 days"
    assert props["n3"]["failures_counted"].startswith("3 quarantine(s) in ")
    assert float(props["n3"]["goodput_failure_cost_node_hours_per_hour"]) > 0
    page = (run_dir / "summary.html").read_text()
    assert "Repeat offenders, quarantined 3 times or more in 30 days (released only by a " \
           "person): <a href='#n-n3'>n3</a> (3 times)" in page

    shown = subprocess.run([sys.executable, "-m", "burnin", "history", "n3", "--inventory",
                            str(inv)], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("n3: a repeat offender: quarantined 3 times in 30 days")
    assert "n3: 6 run(s) kept" in shown.stdout, shown.stdout
    kept = [ln.split()[2] for ln in shown.stdout.splitlines()
            if ln.startswith("  ") and " run " in ln and "speed" in ln]
    assert kept == ["failed", "passed"] * 3, shown.stdout
    as_json = burnin("history", "n3", "--json", "--inventory", str(inv))  # in this process
    (node,) = json.loads(as_json.stdout)["nodes"]
    assert [r["outcome"] for r in node["runs"]] == ["failed", "passed"] * 3
    assert node["runs"][0]["reasons"][0].startswith("health: probe health exited")
