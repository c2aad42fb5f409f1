"""Probe output is hostile input: nodes whose output lies, planted below the controller (a
node `python` that runs the real probe and edits what it prints). Each fails exactly the
planted node; honest peers pass; the run finishes with its reports and `latest` moved;
nothing is printed as a traceback."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from support.replay import replay_python
from support.suiterun import junit_cases, run_suite

from burnin.inventory.schema import InventoryError, load_inventory
from burnin.ledger.api import Ledger

LIAR = """#!{python}
# A lying node: runs the probe (stdin, the controller's lifeline, passes through; the
# recorded probe of tests/support/replay.py, which answers as the real one did), then edits its
# JSON document, and what it writes to stderr, before the controller reads.
import json, subprocess, sys
done = subprocess.run([{probe!r}, *sys.argv[1:]], stdout=subprocess.PIPE)
doc = json.loads(done.stdout)
probe = doc["probe"]
{edit}
print(json.dumps(doc))
sys.exit(done.returncode)
"""
TINY = {"sdc": {"duration_s": 0.2, "n": 64, "random_repeats": 2},
        "burn": {"duration_s": 1, "n": 64, "sample_s": 0.25, "peer_fraction": 0.001,
                 "clock_fraction": 0},
        "allreduce": {"max_bytes": 65536, "seconds_per_size": 0.02, "peer_fraction": 0,
                      "pair_fraction": 0}}


def liar(path: Path, edit: str) -> str:
    probe = replay_python(path.with_name(f"{path.name}-probe"))
    path.write_text(LIAR.format(python=sys.executable, probe=probe,
                                edit=textwrap.dedent(edit)))
    path.chmod(0o755)
    return str(path)


def three_nodes(pytester, edit: str, **extra) -> Path:
    """Three local nodes whose probes answer with the real probes' recorded documents
    (tests/support/replay.py); n3 edits its own before the controller reads it."""
    inv = pytester.path / "inv.yaml"
    inv.write_text(json.dumps({
        "version": 1, "checks": TINY,
        "defaults": {"transport": "local", "gpus": 0,
                     "python": replay_python(pytester.path / "replay")},
        "quarantine": {"ledger": str(pytester.path / "ledger.db")},
        "nodes": [{"name": "n1"}, {"name": "n2"},
                  {"name": "n3", "python": liar(pytester.path / "liar", edit)}], **extra}))
    Ledger(pytester.path / "ledger.db")  # burnin ledger init: a run never creates one
    return inv


def assert_clean_run(result, reports: Path) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text
    run_dir = (reports / "latest").resolve()
    for part in ("junit.xml", "summary.html", "metrics.prom"):
        assert (run_dir / part).stat().st_size > 0, part


@pytest.mark.parametrize("check,edit,why", [
    ("burn", "if probe == 'burn': doc['devices'][0]['tflops'] = 'fast'",
     "malformed probe output: devices[0].tflops: expected a number from 0 to 100000, "
     "got string 'fast'"),
    ("health", "if probe == 'health': doc['figures']['gpu'] = "
               "{'nvml': 'present', 'driver': ['550', '535']}",
     "malformed probe output: figures.gpu.driver: expected a string, got a list"),
    ("sdc", "if probe == 'sdc': doc['devices'][0]['known']['events'] = 'none'",
     "malformed probe output: devices[0].known.events: expected a list, got string"),
], ids=["string-tflops", "list-driver", "string-events"])
def test_a_malformed_figure_fails_only_its_node(pytester, check, edit, why):
    result, reports = run_suite(pytester, three_nodes(pytester, edit), "-k", check)
    cases = junit_cases(reports)
    assert cases["n1"][check] == cases["n2"][check] == ("passed", ""), cases
    outcome, message = cases["n3"][check]
    assert outcome == "failure" and why in message, message
    assert_clean_run(result, reports)
    result.assert_outcomes(passed=2, failed=1)


def test_a_node_claiming_20_devices_at_5000_tflops_cannot_poison_the_fleet(pytester):
    """It fails (wrong count, beyond any plausible figure, a foreign digest); its honest
    peers are not made stragglers or the odd digest out by its twenty votes.

    Burn runs with peer_fraction 1: any node below the fleet's median fails. Only the
    device-count filter (Fleet.voters) keeps the liar from voting: with its vote the
    median of three nodes is the faster honest node, and the slower one fails as a
    straggler; without it, two nodes are too few to compare and both pass."""
    edit = """
        if probe == 'burn':
            dev = dict(doc['devices'][0], tflops=5000.0)
            doc['devices'] = [dict(dev, device=f'cpu:{i}') for i in range(20)]
        if probe == 'sdc':
            dev = doc['devices'][0]
            dev['known']['digest'] = 'f' * 64
            doc['devices'] = [dict(dev, device=f'cpu:{i}') for i in range(20)]
    """
    strict = {**TINY, "burn": {**TINY["burn"], "peer_fraction": 1.0}}
    result, reports = run_suite(pytester, three_nodes(pytester, edit, checks=strict), "-k",
                                "sdc or burn")
    cases = junit_cases(reports)
    for node in ("n1", "n2"):
        assert cases[node] == {"sdc": ("passed", ""), "burn": ("passed", "")}, cases[node]
    for check in ("sdc", "burn"):
        outcome, message = cases["n3"][check]
        assert outcome == "failure"
        assert "the probe reported 20 device(s), expected 1" in message, message
    assert "differs from" in cases["n3"]["sdc"][1]
    assert_clean_run(result, reports)


def test_a_bad_progress_line_is_dropped_and_each_probe_runs_once(pytester):
    # A string figure and 3,000 nested brackets on stderr, where progress lines travel.
    edit = """
        if probe == 'burn':
            sys.stderr.write('BURNIN_PROGRESS {"device": "cpu", "tflops": "fast"}\\n')
            sys.stderr.write('BURNIN_PROGRESS ' + '[' * 3000 + '\\n')
            sys.stderr.flush()
    """
    result, reports = run_suite(pytester, three_nodes(pytester, edit), "-k", "burn")
    result.assert_outcomes(passed=3)
    lines = (reports / "latest" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3, "every probe ran exactly once: outcomes were kept"
    assert_clean_run(result, reports)


def test_control_characters_from_a_node_reach_no_terminal_ledger_or_report(pytester):
    edit = """
        if probe == 'health':
            doc['errors'].append('GPU \\x1b[2J\\x1b[31mfine\\x07\\x00 really')
    """
    result, reports = run_suite(pytester, three_nodes(pytester, edit), "-k", "health")
    shown = result.stdout.str()
    assert "\x1b[2J" not in shown and "\x07" not in shown
    assert "GPU \\x1b[2J\\x1b[31mfine\\x07\\x00 really" in shown
    junit = (reports / "latest" / "junit.xml").read_text()
    assert "\x1b" not in junit and "\x00" not in junit
    reasons = Ledger(pytester.path / "ledger.db").get("n3").reasons
    assert all("\x1b" not in r and "\x07" not in r for r in reasons)
    assert_clean_run(result, reports)


def test_a_node_name_that_is_a_path_is_refused(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\nnodes:\n  - name: ../../x\n")
    with pytest.raises(InventoryError, match="is not a valid node name"):
        load_inventory(inv)


def test_a_report_part_that_cannot_be_drawn_degrades_and_latest_still_moves(pytester):
    # The page renderer breaking (a bug, a record of a shape it did not expect) must not
    # stop the run: junit.xml is written and latest moved first.
    # Patched for this inner run only: it runs in this process, where burnin.report.summary is
    # already imported, and a patch left behind would break every later page.
    pytester.makepyfile(breakpage="""
        import burnin.report.summary.page
        real = burnin.report.summary.page.render
        def broken(*args, **kwargs):
            raise ValueError("cannot draw this")
        def pytest_configure(config):
            burnin.report.summary.page.render = broken
        def pytest_unconfigure(config):
            burnin.report.summary.page.render = real
    """)
    pytester.syspathinsert()
    inv = three_nodes(pytester, "pass")
    result, reports = run_suite(pytester, inv, "-k", "health", "-p", "breakpage")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*report: summary.html could not be made: ValueError: "
                                 "cannot draw this*"])
    run_dir = (reports / "latest").resolve()
    page = (run_dir / "summary.html").read_text()
    assert "The full summary could not be drawn" in page and "n3" in page
    assert (run_dir / "metrics.prom").read_text().count("burnin_check_passed{") == 3


def test_reports_and_the_ledger_are_readable_by_their_owner_only(pytester):
    result, reports = run_suite(pytester, three_nodes(pytester, "pass"), "-k", "health")
    result.assert_outcomes(passed=3)
    run_dir = (reports / "latest").resolve()
    assert reports.stat().st_mode & 0o777 == 0o700
    assert run_dir.stat().st_mode & 0o777 == 0o700
    assert (pytester.path / "ledger.db").stat().st_mode & 0o777 == 0o600


def test_a_fleet_of_failures_is_listed_by_burnin_not_by_pytest_tracebacks(pytester,
                                                                            monkeypatch):
    """pytest's FAILURES section is quadratic in the run's reports: past a bound, burnin's
    summary lists the failing nodes and pytest's per-failure tracebacks are left out."""
    # -ra cuts its lines at the terminal's width, and the suite's path from pytester's
    # folder is as long as the checkout's: wide enough that the reason is never cut.
    monkeypatch.setenv("COLUMNS", "400")
    pytester.makepyfile(lowbound="""
        import burnin.plugin.terminal
        real = burnin.plugin.terminal.FAILURE_LISTING
        def pytest_configure(config):
            burnin.plugin.terminal.FAILURE_LISTING = 0
        def pytest_unconfigure(config):
            burnin.plugin.terminal.FAILURE_LISTING = real
    """)
    pytester.syspathinsert()
    edit = "if probe == 'health': doc['errors'] = ['planted']"
    result, reports = run_suite(pytester, three_nodes(pytester, edit), "-k", "health",
                                "-p", "lowbound")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "= FAILURES =" not in out
    assert "1 failed tests: pytest's tracebacks left out (more than 0)" in out
    result.stdout.fnmatch_lines(["*n3: health*", "FAILED *test_health*n3*planted*"])
    assert junit_cases(reports)["n3"]["health"][0] == "failure"
