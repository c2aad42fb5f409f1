"""One node, one blame: a node's document can only fail that node; a fault of the
controller ends the run incomplete and blames nobody; no unfinished run leaves an
admissible report. Real runs of the suites on local nodes, with faults planted below the
controller (a node `python` that edits what the real probe prints, a disk that fills)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.incli import burnin
from support.replay import replay_python
from support.suiterun import SUITES, junit_cases, run_suite, script
from test_hostile import assert_clean_run, three_nodes

from burnin.ledger.api import Ledger

REPO = Path(__file__).resolve().parent.parent


def admit(junit: Path, *args: str) -> subprocess.CompletedProcess:
    """`burnin admit` in this process (tests/support/incli.py): what the gate decides from
    the report is the claim here; its entry point runs as a process in tests/test_admit.py."""
    return burnin("admit", str(junit), *args)


def with_quarantine(inv: Path, hook_log: Path, **more) -> Path:
    """The inventory with a command hook that logs every node it is run for."""
    doc = json.loads(inv.read_text())
    hook = script(inv.with_name("hook.sh"), f'echo "$@" >> {hook_log}\n')
    doc["quarantine"] = {**doc["quarantine"], "actions": ["command"], "command": [hook, "{node}"]}
    doc.update(more)
    inv.write_text(json.dumps(doc))
    return inv


def honest_failure(pytester, inv: Path, node: str = "n2") -> None:
    """`node` fails honestly: its interpreter says the GPU fell off and exits 3."""
    doc = json.loads(inv.read_text())
    bad = script(pytester.path / f"{node}-python", "echo 'GPU fell off the bus' >&2\nexit 3\n")
    for entry in doc["nodes"]:
        if entry["name"] == node:
            entry["python"] = bad
    inv.write_text(json.dumps(doc))


# --- 1. text a node prints cannot end the run ----------------------------------------------

SURROGATE = """
    if probe == 'health':
        doc['errors'].append('\\ud800 \\u202egnorw\\u202c')
        doc['node']['hostname'] = 'h\\ud800'
    if probe == 'sdc':
        doc['devices'][0]['uuid'] = 'GPU-\\udfff\\r\\x1b[2J'
"""


@pytest.mark.parametrize("dry", [False, True], ids=["quarantine", "no-quarantine"])
def test_a_lone_surrogate_from_a_node_fails_that_node_and_the_run_completes(pytester, dry):
    """Valid JSON, one character UTF-8 cannot encode: it used to roll back the ledger's
    one transaction (nobody quarantined, no junit.xml, `latest` left on the previous run's
    report, which then admitted a node that had just failed)."""
    first, reports = run_suite(pytester, three_nodes(pytester, "pass"), "-k", "health")
    assert first.ret == 0  # a previous report that admits everybody
    inv = three_nodes(pytester, SURROGATE)
    honest_failure(pytester, inv)
    result, reports = run_suite(pytester, inv, "-k", "health or sdc",
                                *(["--no-quarantine"] if dry else []))
    assert result.ret == 1
    cases = junit_cases(reports)
    assert cases["n1"] == {"health": ("passed", ""), "sdc": ("passed", "")}
    assert cases["n2"]["health"][0] == "failure"
    outcome, message = cases["n3"]["health"]
    assert outcome == "failure" and "probe error: \ufffd \\u202egnorw\\u202c" in message, message
    assert cases["n3"]["sdc"] == ("passed", "")
    assert Ledger(pytester.path / "ledger.db").quarantined() == (set() if dry else {"n2", "n3"})
    decided = admit(reports / "latest" / "junit.xml", "--require", "health,sdc", "--json")
    assert decided.returncode == 1, decided.stderr
    assert json.loads(decided.stdout)["admitted"] == ["n1"]
    # metrics.prom for the whole fleet, with the node's text made safe in its label.
    metrics = (reports / "latest" / "metrics.prom").read_text()
    assert 'UUID="GPU-\ufffd\\\\x0d\\\\x1b[2J"' in metrics
    assert metrics.count("burnin_device_flops_per_second{") == 2  # n2's sdc did not run
    assert_clean_run(result, reports)


# --- 2. a document its judge or the fleet's figures cannot take fails that node alone ----

BREAKERS = {
    # A link named by no number: the judge names it as it is (and, since the NVLink 5 work,
    # no longer stops at it); its recovery fails the node that reported it, no other.
    "fabric-link-name": ("fabric", """
        if probe == 'fabric':
            doc['devices'] = [{'device': 'cpu', 'nvlink': {'links': 1, 'active': 1,
                               'growth': {'not-a-link': {'recovery': 1}}}}]
    """),
    "sdc-missing-dtype": ("sdc", """
        if probe == 'sdc':
            del doc['devices'][0]['known']['dtype']
    """),
    "storage-missing-stream": ("storage", """
        if probe == 'storage':
            for d in doc['devices']:
                d.pop('stream', None)
    """),
    "burn-clock-overflow": ("burn", """
        if probe == 'burn':
            t = doc['devices'][0].setdefault('telemetry', {})
            t['series'] = {'sm_mhz': [1e308, 1e308]}
    """),
    "deep-nesting": ("health", """
        if probe == 'health':
            deep = []
            for _ in range(975):
                deep = [deep]
            doc['figures']['deep'] = deep
    """),
}


@pytest.mark.parametrize("check,edit", BREAKERS.values(), ids=BREAKERS)
def test_one_nodes_document_never_fails_another_node(pytester, check, edit):
    """Each of these used to raise while judging, summarising or re-encoding one node's
    document, and so error every node: the inter-node all-reduce asks for every node's
    verdict, the fleet's figure overflowed, results.jsonl could not be written."""
    inv = three_nodes(pytester, edit)
    doc = json.loads(inv.read_text())
    for entry in doc["nodes"]:  # where the inter-node all-reduce meets
        entry["address"] = "127.0.0.1"
    inv.write_text(json.dumps(doc))
    result, reports = run_suite(pytester, inv, "-k", f"{check} or allreduce_internode")
    cases = junit_cases(reports)
    for node in ("n1", "n2"):
        assert cases[node][check] == ("passed", ""), cases
        assert cases[node]["allreduce_internode"] == ("passed", ""), cases
    outcome, message = cases["n3"][check]
    assert outcome == "failure", cases["n3"]
    assert cases["n3"]["allreduce_internode"][0] == "skipped", cases["n3"]
    assert Ledger(pytester.path / "ledger.db").quarantined() == {"n3"}
    records = (reports / "latest" / "results.jsonl").read_text().splitlines()
    assert sum(f'"check": "{check}"' in r for r in records) == 3, "each probe ran once"
    assert result.ret == 1
    assert_clean_run(result, reports)


# --- 3. a fault of the controller blames nobody --------------------------------------------

def test_an_unwritable_reports_dir_stops_the_run_before_any_node(pytester, tmp_path):
    hook_log = tmp_path / "hook.log"
    inv = with_quarantine(three_nodes(pytester, "pass"), hook_log)
    honest_failure(pytester, inv)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = pytester.runpytest(SUITES, "--inventory", str(inv), "--reports",
                                str(blocker / "reports"), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot write reports in" in result.stderr.str()
    assert not hook_log.exists()
    assert Ledger(pytester.path / "ledger.db").quarantined() == set()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_missing_quarantine_command_stops_the_run_before_any_node(pytester, tmp_path):
    inv = three_nodes(pytester, "pass")
    doc = json.loads(inv.read_text())
    doc["quarantine"].update(actions=["command"], command=[str(tmp_path / "no-such-hook")])
    inv.write_text(json.dumps(doc))
    result, reports = run_suite(pytester, inv, "-k", "health")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "no-such-hook" in result.stderr.str()
    assert not (reports / "latest").exists()


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs: a real file system that fills up. Root only; CI runs as root."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the full-disk test needs root in CI")
        pytest.skip("mounting a tmpfs needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_ends_the_run_incomplete_and_quarantines_nobody(pytester, tmp_path,
                                                                    small_disk):
    """The reports' disk fills while the probes run (a node's own interpreter fills it
    here, as anything else on the controller could): the results cannot be recorded. The
    run ends incomplete (exit 3), no node is quarantined or drained for it, not even one
    that failed honestly, and `latest` admits nobody."""
    hook_log = tmp_path / "hook.log"
    inv = with_quarantine(three_nodes(pytester, "pass"), hook_log)
    honest_failure(pytester, inv, "n3")
    doc = json.loads(inv.read_text())
    doc["nodes"][0]["python"] = script(pytester.path / "filler", (
        f"dd if=/dev/zero of={small_disk}/filler bs=64k 2>/dev/null\n"
        f'exec {replay_python(pytester.path / "replay-filler")} "$@"\n'))
    inv.write_text(json.dumps(doc))
    reports = small_disk / "reports"
    result = pytester.runpytest(SUITES, "--inventory", str(inv), "--reports", str(reports),
                                "-k", "health or sdc", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["*the run did not complete: controller fault: *"])
    assert not hook_log.exists()
    assert Ledger(pytester.path / "ledger.db").quarantined() == set()
    decided = admit(reports / "latest" / "junit.xml")
    assert decided.returncode == 2 and "did not complete" in decided.stderr, decided


def test_a_judge_that_fails_on_every_node_is_the_controllers_fault(pytester, tmp_path):
    """A bug of ours that raises for every node is nobody's document: the run ends
    incomplete, rather than quarantine (and drain) the fleet."""
    pytester.makepyfile(brokenjudge="""
        import dataclasses
        from burnin.checks import CHECKS
        real = CHECKS["health"]
        def boom(node, outcome, j):
            raise ZeroDivisionError("a bug in the judge")
        def pytest_configure(config):
            CHECKS["health"] = dataclasses.replace(real, judge=boom)
        def pytest_unconfigure(config):
            CHECKS["health"] = real
    """)
    pytester.syspathinsert()
    hook_log = tmp_path / "hook.log"
    inv = with_quarantine(three_nodes(pytester, "pass"), hook_log)
    result, reports = run_suite(pytester, inv, "-k", "health or sdc", "-p", "brokenjudge")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines(["*controller fault: *health judge failed on every node*"])
    assert not hook_log.exists()
    assert Ledger(pytester.path / "ledger.db").quarantined() == set()
    assert all("sdc" not in c for c in junit_cases(reports).values()), "the run stopped"
    assert admit(reports / "latest" / "junit.xml").returncode == 2


# --- 5. no stale report is ever admissible ---------------------------------------------------

def test_latest_copied_into_a_directory_is_replaced_and_the_new_verdict_is_read(pytester):
    """A CI artifact step (or cp -r, rsync -L) turns `latest` into a real directory: the
    next run replaces it, and a node that now fails is not admitted from the copy."""
    first, reports = run_suite(pytester, three_nodes(pytester, "pass"), "-k", "health")
    assert first.ret == 0
    old = (reports / "latest").resolve()
    (reports / "latest").unlink()
    subprocess.run(["cp", "-r", str(old), str(reports / "latest")], check=True)
    inv = three_nodes(pytester, "pass")
    honest_failure(pytester, inv)
    second, reports = run_suite(pytester, inv, "-k", "health")
    assert second.ret == 1
    assert (reports / "latest").is_symlink()
    decided = admit(reports / "latest" / "junit.xml", "--require", "health", "--json")
    assert json.loads(decided.stdout)["admitted"] == ["n1", "n3"]


def test_a_killed_controller_leaves_no_admissible_report(pytester, tmp_path):
    """SIGKILL mid-run: nothing at the end can write anything. `latest` was moved off the
    previous (admitting) report before any node was touched."""
    first, reports = run_suite(pytester, three_nodes(pytester, "pass"), "-k", "health")
    assert admit(reports / "latest" / "junit.xml", "--require", "health").returncode == 0
    before = {d.name for d in reports.iterdir()}
    inv = three_nodes(pytester, "pass")
    doc = json.loads(inv.read_text())
    doc["defaults"]["python"] = replay_python(pytester.path / "slow", delay_s=120)
    inv.write_text(json.dumps(doc))
    run = subprocess.Popen([sys.executable, "-m", "pytest", SUITES, "--inventory", str(inv),
                            "--reports", str(reports), "-k", "sdc", "-p", "no:cacheprovider"],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
                (d / ".probes").exists() for d in reports.iterdir() if d.name not in before):
            time.sleep(0.2)
        time.sleep(1)  # the probes are running
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # the controller and its probes
        run.wait(timeout=60)
    decided = admit(reports / "latest" / "junit.xml")
    assert decided.returncode == 2, decided
    assert "did not complete (in progress, or its controller died" in decided.stderr


def test_admit_with_the_inventory_refuses_a_node_in_quarantine(pytester, tmp_path):
    first, reports = run_suite(pytester, three_nodes(pytester, "pass"), "-k", "health")
    kept = tmp_path / "junit-all-passed.xml"
    kept.write_text((reports / "latest" / "junit.xml").read_text())
    inv = three_nodes(pytester, "pass")
    honest_failure(pytester, inv)
    run_suite(pytester, inv, "-k", "health")
    decided = admit(kept, "--inventory", str(inv), "--require", "health", "--json")
    assert decided.returncode == 1, decided.stderr
    out = json.loads(decided.stdout)
    assert out["admitted"] == ["n1", "n3"]
    assert out["rejected"]["n2"][0].startswith("in quarantine: since run ")
    ledger = admit(kept, "--ledger", str(pytester.path / "ledger.db"), "--require", "health",
                   "--json")
    assert json.loads(ledger.stdout)["admitted"] == ["n1", "n3"]
    missing = admit(kept, "--ledger", str(tmp_path / "nowhere.db"))
    assert missing.returncode == 2 and "no node is admitted" in missing.stderr


# --- small things ----------------------------------------------------------------------------

def test_every_node_in_quarantine_is_nothing_to_test(pytester):
    inv = three_nodes(pytester, "pass")
    ledger = Ledger(pytester.path / "ledger.db")
    for n in ("n1", "n2", "n3"):
        ledger.quarantine_by_hand(n, "inv", "bad PSU", "ops")
    result, reports = run_suite(pytester, inv, "-k", "health")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*nothing to test: every selected node is in quarantine*"])
    cases = junit_cases(reports)
    assert {n: c["health"][0] for n, c in cases.items()} == dict.fromkeys(
        ("n1", "n2", "n3"), "skipped")
    assert admit(reports / "latest" / "junit.xml").returncode == 1


@pytest.mark.parametrize("how", ["emptied", "deleted"])
def test_a_ledger_that_was_there_and_is_gone_is_an_error_not_an_empty_ledger(pytester, how):
    inv = three_nodes(pytester, "pass")
    path = pytester.path / "ledger.db"
    Ledger(path).quarantine_by_hand("n2", "inv", "bad PSU", "ops")
    if how == "emptied":
        path.write_bytes(b"")
    else:
        path.unlink()
    result, _ = run_suite(pytester, inv, "-k", "health")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"the quarantine ledger {path} is" in result.stderr.str()
    assert not path.exists() or path.stat().st_size == 0, "nothing was made of it"


def test_a_gpu_model_node_with_gpus_auto_and_no_nvml_fails_health(pytester):
    """A node without NVML (the recorded health facts of a CPU node) that the inventory
    gives a GPU model, with gpus: auto, is a GPU node that shows none, not a CPU node that
    passes."""
    inv = pytester.path / "inv.yaml"
    inv.write_text(json.dumps({
        "version": 1,
        "defaults": {"transport": "local", "python": replay_python(pytester.path / "replay")},
        "quarantine": {"ledger": str(pytester.path / "ledger.db")},
        "nodes": [{"name": "g1", "gpu_model": "H100-SXM5-80GB"}]}))
    Ledger(pytester.path / "ledger.db")  # burnin ledger init: a run never creates one
    result, reports = run_suite(pytester, inv, "-k", "health")
    outcome, message = junit_cases(reports)["g1"]["health"]
    assert outcome == "failure"
    assert "inventory says gpu_model H100-SXM5-80GB (gpus: auto), but NVML is absent" in message


def test_a_check_that_does_not_apply_to_a_node_is_not_one_it_failed(pytester):
    """A mixed fleet: the PCIe probe runs on every node with the rest, and on a CPU node
    says there is nothing to measure. That is no failure of the CPU node: it still joins
    the inter-node all-reduce (it was left out as 'failed pcie')."""
    py = replay_python(pytester.path / "replay")
    inv = pytester.path / "inv.yaml"
    inv.write_text(json.dumps({
        "version": 1, "defaults": {"transport": "local", "python": py},
        "quarantine": {"ledger": str(pytester.path / "ledger.db")},
        "nodes": [{"name": name, "address": "127.0.0.1", "gpus": 2 if name[0] == "g" else 0}
                  for name in ("c1", "c2", "g1", "g2")]}))
    Ledger(pytester.path / "ledger.db")  # burnin ledger init: a run never creates one
    result, reports = run_suite(pytester, inv, "-k", "health or pcie or allreduce_internode")
    cases = junit_cases(reports)
    assert {n: c["allreduce_internode"] for n, c in cases.items()} == dict.fromkeys(
        ("c1", "c2", "g1", "g2"), ("passed", "")), cases
    assert "pcie" not in cases["c1"] and cases["g1"]["pcie"] == ("passed", "")
