"""The dcgm check: a fake `dcgmi` answering with documents in DCGM's JSON shapes (DCGM 3's
"DCGM GPU Diagnostic" with gpu_ids, DCGM 4's "DCGM Diagnostic" with entity_id); a GPU
node without dcgmi passes (DCGM does not apply there) and runs nothing."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from suiterun import junit_cases, run_suite, script

from burnin.checks import Judging, resolve_settings
from burnin.checks.dcgm import judge
from burnin.nodes import Node
from burnin.probe import ProbeOutcome

REPO = Path(__file__).resolve().parent.parent

DCGM4_FAIL = {"DCGM Diagnostic": {"version": "4.2.3", "test_categories": [
    {"category": "Deployment", "tests": [{"name": "software", "results": [
        {"entity_group": "GPU", "entity_id": 0, "status": "Pass"},
        {"entity_group": "GPU", "entity_id": 1, "status": "Pass"}]}]},
    {"category": "Hardware", "tests": [{"name": "memory", "results": [
        {"entity_group": "GPU", "entity_id": 0, "status": "Pass"},
        {"entity_group": "GPU", "entity_id": 1, "status": "Fail", "warnings": [
            {"warning": "GPU 1 had uncorrectable memory errors", "error_id": 50}]}]}]},
    {"category": "Integration", "tests": [{"name": "pcie", "results": [
        {"entity_group": "GPU", "entity_id": 0, "status": "Warn",
         "warnings": ["Clocks are being throttled for GPU 0"]},
        {"entity_group": "GPU", "entity_id": 1, "status": "Skip"}]}]}]}}
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
    cases = {n: c["dcgm"] for n, c in junit_cases(reports).items()}
    assert cases["good"] == cases["without"] == ("passed", "")
    assert cases["bad"] == ("failure", "DCGM level 1 Hardware/memory on GPU 1: fail: GPU 1 "
                                       "had uncorrectable memory errors (DCGM error id 50)")
    assert (tmp_path / "bad.argv").read_text().split() == ["diag", "-r", "1", "-j"]
    records = {r["node"]: r for r in map(json.loads, (reports / "latest" / "results.jsonl")
                                         .read_text().splitlines())}
    assert records["without"]["data"]["figures"]["applies"] is False
    assert "not found" in records["without"]["data"]["figures"]["why"]
    assert records["good"]["data"]["figures"]["version"] == "3.3.5"


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
