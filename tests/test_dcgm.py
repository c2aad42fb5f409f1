"""The dcgm check: a fake `dcgmi` answering with documents in DCGM's JSON shapes (DCGM 3's
"DCGM GPU Diagnostic" with gpu_ids, DCGM 4's "DCGM Diagnostic" with entity_id); a GPU
node without dcgmi gets no dcgm testcase (its health facts found no dcgmi) and admission
does not require the check of it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from suiterun import junit_cases, run_suite, script

from burnin.admit import Report, read_junit
from burnin.checks import Judging, applicable, resolve_settings
from burnin.checks.dcgm import judge
from burnin.nodes import Node
from burnin.probe import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent

def warning(text: str, error_id: int) -> dict:
    return {"error_category": 2, "error_id": error_id, "error_severity": 2, "warning": text}


def gpu(i: int, status: str, **more) -> dict:
    return {"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": status,
            **more}


# DCGM 4's shape, as its own schema gives it (NVIDIA/DCGM testing/python3/
# dcgm_diag_schema.json): the version under "metadata", a test_summary per test.
DCGM4_FAIL = {"DCGM Diagnostic": {"test_categories": [
    {"category": "Deployment", "tests": [{"name": "software", "test_summary": {
        "status": "Pass"}, "results": [gpu(0, "Pass"), gpu(1, "Pass")]}]},
    {"category": "Hardware", "tests": [{"name": "memory", "test_summary": {"status": "Fail"},
                                        "results": [gpu(0, "Pass"), gpu(1, "Fail", warnings=[
        warning("GPU 1 had uncorrectable memory errors", 50)])]}]},
    {"category": "Integration", "tests": [{"name": "pcie", "test_summary": {"status": "Pass"},
                                           "results": [
        gpu(0, "Warn", warnings=["Clocks are being throttled for GPU 0"]),
        gpu(1, "Skip")]}]}]},
    "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1, "entities": [
        {"entity_id": 0, "device_id": "2330"}, {"entity_id": 1, "device_id": "2330"}]}],
    "metadata": {"version": "4.2.3", "Driver Version Detected": "570.124.06"}}
DCGM3_PASS = {"DCGM GPU Diagnostic": {"version": "3.3.5", "test_categories": [
    {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}]},
    {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [
        {"gpu_ids": "0", "status": "Pass"}, {"gpu_ids": "1", "status": "Pass"}]}]}]}}


def fake_dcgmi(tmp_path: Path, name: str, doc: dict, exit_status: int) -> str:
    """An executable answering `dcgmi diag -r N -j` with `doc`, and recording its argv."""
    answer = tmp_path / f"{name}.json"
    answer.write_text(json.dumps(doc))
    return script(tmp_path / f"{name}-dcgmi",
                  f'echo "$@" > {tmp_path / name}.argv\ncat {answer}\nexit {exit_status}\n')


def test_dcgm_fails_the_node_whose_diag_failed_and_passes_where_absent(pytester, nvml,
                                                                        tmp_path):
    nvml(devices=[{}, {}])
    bad = fake_dcgmi(tmp_path, "bad", DCGM4_FAIL, 226)
    good = fake_dcgmi(tmp_path, "good", DCGM3_PASS, 0)
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 2}}
        nodes:
          - name: bad
            checks: {{dcgm: {{dcgmi: {bad}}}}}
          - name: good
            checks: {{dcgm: {{dcgmi: {good}}}}}
          - name: without
            checks: {{dcgm: {{dcgmi: {tmp_path / 'no-such-dcgmi'}}}}}
        """))
    result, reports = run_suite(pytester, inv, "-k", "dcgm", "--profile", "quick")
    cases = junit_cases(reports)
    assert cases["without"] == {}, "not collected where the node's facts found no dcgmi"
    cases = {n: c["dcgm"] for n, c in cases.items() if c}
    assert cases["good"] == ("passed", "")
    assert cases["bad"] == ("failure", "DCGM level 1 Hardware/memory on GPU 1: fail: GPU 1 "
                                       "had uncorrectable memory errors (DCGM error id 50)")
    assert (tmp_path / "bad.argv").read_text().split() == ["diag", "-r", "1", "-j"]
    records = {(r["check"], r["node"]): r for r in map(
        json.loads, (reports / "latest" / "results.jsonl").read_text().splitlines())}
    # The probe runs on every node of the run, as pcie's does: there it found nothing.
    assert records[("dcgm", "without")]["data"]["figures"]["applies"] is False
    assert records[("health", "without")]["data"]["figures"]["tools"] == {
        "dcgm": {"command": str(tmp_path / "no-such-dcgmi"), "path": None}}
    assert records[("dcgm", "good")]["data"]["figures"]["version"] == "3.3.5"
    assert records[("dcgm", "bad")]["data"]["figures"]["version"] == "4.2.3"
    report = read_junit(reports / "latest" / "junit.xml")
    assert "dcgm" not in report.required("without")
    assert "dcgm" in report.required("good") and "dcgm" in report.required("bad")
    assert report.properties["good"]["equipped_checks"] == "dcgm"
    assert report.properties["without"]["equipped_checks"] == ""


def test_admission_fails_closed_where_the_tools_are_unknown():
    report = Report(properties={"n1": {"gpus": "8", "nodes_in_run": "1"},
                                "n2": {"gpus": "8", "nodes_in_run": "1",
                                       "equipped_checks": ""}})
    assert "dcgm" in report.required("n1"), "an older report, or health never ran"
    assert "dcgm" not in report.required("n2")
    assert "dcgm" not in applicable(0, 1), "a CPU-only node, whatever its tools"


def test_the_probe_reports_does_not_apply_where_dcgmi_is_gone(tmp_path):
    node = Node(name="n", address="n", transport="local")
    out = run_probe(LocalTransport(node, REPO / "probes"), "dcgm",
                    {"settings": {"dcgmi": str(tmp_path / "gone")}}, timeout_s=120)
    assert out.ok and out.data["figures"]["applies"] is False
    assert verdict(out).passed


def outcome(figures: dict, errors=()) -> ProbeOutcome:
    return ProbeOutcome("n", "dcgm", True, data={"probe": "dcgm", "schema": 1, "node": {},
                                                 "devices": [], "figures": figures,
                                                 "errors": list(errors)})


def verdict(o: ProbeOutcome):
    return judge(Node(name="n", address="n"), o, Judging(resolve_settings("dcgm", "standard")))


def test_a_warning_warns_and_a_nonzero_exit_without_a_failed_test_fails():
    warn = {"category": "Integration", "test": "pcie", "gpu": "0", "status": "Warn",
            "warnings": ["Clocks are being throttled for GPU 0"], "info": []}
    v = verdict(outcome({"applies": True, "level": 2, "exit_status": 0, "results": [warn]}))
    assert v.passed and v.warnings == ("DCGM level 2 Integration/pcie on GPU 0: warn: Clocks "
                                       "are being throttled for GPU 0",)
    v = verdict(outcome({"applies": True, "level": 2, "exit_status": 1, "results": [warn]}))
    assert v.failures == ("dcgmi diag exited 1 without a failed test",)


def test_the_probe_parses_both_dcgm_shapes():
    import sys
    sys.path.insert(0, str(REPO / "probes"))
    try:
        import dcgm as probe
    finally:
        sys.path.remove(str(REPO / "probes"))
    four = probe.parse(DCGM4_FAIL)
    assert [(r["test"], r["gpu"], r["status"]) for r in four] == [
        ("software", "0", "Pass"), ("software", "1", "Pass"), ("memory", "0", "Pass"),
        ("memory", "1", "Fail"), ("pcie", "0", "Warn"), ("pcie", "1", "Skip")]
    three = probe.parse(DCGM3_PASS)
    assert [(r["category"], r["test"], r["gpu"]) for r in three] == [
        ("Deployment", "Denylist", None), ("Hardware", "GPU Memory", "0"),
        ("Hardware", "GPU Memory", "1")]


def test_dcgms_own_words_fail_the_node_where_no_result_does(tmp_path):
    """A runtime error (DCGM could not run its diagnostic), a test whose summary fails with
    no failing result, and a failing CPU entity (DCGM 4's CPU diagnostic) each fail, in
    DCGM's own words and naming the entity as DCGM does."""
    cases = {
        "runtime": ({"DCGM Diagnostic": {"runtime_error": "Unable to create a group of GPUs",
                                         "test_categories": []}}, 226,
                    ["probe error: dcgmi diag: runtime error: Unable to create a group of "
                     "GPUs"]),
        "summary": ({"DCGM Diagnostic": {"test_categories": [{"category": "Stress", "tests": [
            {"name": "targeted_power", "test_summary": {"status": "Fail"},
             "results": []}]}]}}, 0,
                    ["DCGM level 1 Stress/targeted_power: fail: DCGM's test summary says "
                     "Fail; no result names an entity"]),
        "cpu": ({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
            {"name": "cpu_eud", "test_summary": {"status": "Fail"}, "results": [
                {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 0,
                 "status": "Fail", "warnings": [warning("CPU 0 failed its EUD", 101)]}]}]}]}},
                0, ["DCGM level 1 Hardware/cpu_eud on CPU 0: fail: CPU 0 failed its EUD "
                    "(DCGM error id 101)"]),
    }
    node = Node(name="n", address="n", transport="local")
    for name, (doc, status, expected) in cases.items():
        dcgmi = fake_dcgmi(tmp_path, name, doc, status)
        out = run_probe(LocalTransport(node, REPO / "probes"), "dcgm",
                        {"settings": {"dcgmi": dcgmi, "level": 1}}, timeout_s=120)
        assert out.ok, out.reason
        assert list(verdict(out).failures) == expected, name
