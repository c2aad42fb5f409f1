"""The dcgm check: a fake `dcgmi` answering with what real dcgmi prints and exits with,
built from DCGM's own sources (tests/fixtures/dcgm/, provenance beside each document); a
GPU node without dcgmi gets no dcgm testcase (its health facts found no dcgmi) and
admission does not require the check of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support.replay import replay_python
from support.suiterun import junit_cases, run_suite, script
from test_dcgm_judge import HOT, judged

from burnin.checks import Judging, applicable, resolve_settings
from burnin.checks.dcgm import SCHEMA, judge
from burnin.gate.admit import Report, read_junit
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome, run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dcgm"
NODE = Node(name="n", address="n", transport="local")


def fixture(name: str) -> dict:
    """A fixture without its provenance note: argv, exit_status, stdout."""
    data = json.loads((FIXTURES / f"{name}.json").read_text())
    data.pop("_provenance")
    return data


def fake_dcgmi(tmp_path: Path, name: str, doc: dict, exit_status: int) -> str:
    """An executable answering `dcgmi diag -r N -j` with `doc` as jsoncpp's toStyledString
    prints it (keys sorted, three-space indent), and recording its argv."""
    answer = tmp_path / f"{name}.json"
    answer.write_text(json.dumps(doc, indent=3, sort_keys=True) + "\n")
    return script(tmp_path / f"{name}-dcgmi",
                  f'echo "$@" > {tmp_path / name}.argv\ncat {answer}\nexit {exit_status}\n')


def from_fixture(tmp_path: Path, name: str) -> str:
    f = fixture(name)
    return fake_dcgmi(tmp_path, name, f["stdout"], f["exit_status"])


def probe(dcgmi: str, level: int = 1, timeout_s: float = 120, **run) -> ProbeOutcome:
    settings = {"dcgmi": dcgmi, "level": level, "timeout_s": timeout_s}
    return run_probe(LocalTransport(NODE, REPO / "probes"), "dcgm", {"settings": settings},
                     timeout_s=timeout_s, schema=SCHEMA, **run)


def verdict(o: ProbeOutcome):
    return judge(NODE, o, Judging(resolve_settings("dcgm", "standard")))


def probe_module():
    sys.path.insert(0, str(REPO / "probes"))
    try:
        import dcgm
    finally:
        sys.path.remove(str(REPO / "probes"))
    return dcgm


def test_dcgm_fails_the_node_whose_diag_failed_and_passes_where_absent(pytester, nvml,
                                                                        tmp_path):
    nvml(devices=[{}, {}])
    nodes = {"bad": "dcgm4-fail", "good": "dcgm4-pass", "warm": "dcgm4-warn",
             "old": "dcgm3-fail", "xid94": "dcgm4-contained"}
    # health runs only to admit the nodes and to look for their dcgmi: it replays (no
    # torch), the tools it reports found as the real probe finds them; dcgm runs for real.
    replay = replay_python(pytester.path / "replay", real=("dcgm",))
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 2, python: {replay}}}
        checks: {{dcgm: {{level: 2}}}}
        # each node's diag planted on its own: no shared cause (burnin/gate/incidents.py)
        quarantine: {{shared_cause: {{min_nodes: 6}}}}
        nodes:
        """) + "".join(f"  - name: {n}\n    checks: {{dcgm: {{dcgmi: "
                       f"{from_fixture(tmp_path, f)}}}}}\n" for n, f in nodes.items())
        + f"  - name: without\n    checks: {{dcgm: {{dcgmi: {tmp_path / 'no-such-dcgmi'}}}}}\n")
    result, reports = run_suite(pytester, inv, "-k", "dcgm", "--profile", "quick")
    cases = junit_cases(reports)
    assert cases["without"] == {}, "not collected where the node's facts found no dcgmi"
    cases = {n: c["dcgm"] for n, c in cases.items() if c}
    mismatch = ("Fail: A memory mismatch was detected on GPU 1, but no error was reported by "
                "CUDA or NVML. (DCGM error id 58, DCGM_ERROR_ISOLATE)")
    assert cases == {
        "good": ("passed", ""),
        "warm": ("passed", ""),  # DCGM's "Fail" of a code it says to watch, exit 226
        # DCGM_ERROR_MONITOR too, exit 226: yet no code to watch, so the node fails.
        "xid94": ("failure", "DCGM level 2 Integration/pcie on GPU 0: Fail: GPU had a "
                  "contained error. (DCGM error id 131 DCGM_FR_CONTAINED_ERROR, "
                  "DCGM_ERROR_MONITOR)"),
        "bad": ("failure", f"DCGM level 2 Hardware/memory on GPU 1: {mismatch}"),
        "old": ("failure", f"DCGM level 2 Hardware/GPU Memory on GPU 1: {mismatch}")}
    for n, f in nodes.items():
        assert (tmp_path / f"{f}.argv").read_text().split() == fixture(f)["argv"], n
    records = {(r["check"], r["node"]): r for r in map(
        json.loads, (reports / "latest" / "results.jsonl").read_text().splitlines())}
    # The probe runs on every node of the run, as pcie's does: there it found nothing.
    assert records[("dcgm", "without")]["data"]["figures"]["applies"] is False
    assert records[("health", "without")]["data"]["figures"]["tools"]["dcgm"] == {
        "command": str(tmp_path / "no-such-dcgmi"), "path": None}
    assert records[("dcgm", "old")]["data"]["figures"]["version"] == "3.3.9"  # at the root
    assert records[("dcgm", "good")]["data"]["figures"]["version"] == "4.6.0"  # metadata
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
    out = probe(str(tmp_path / "gone"))
    assert out.ok and out.data["figures"]["applies"] is False
    assert verdict(out).passed


@pytest.mark.parametrize("name, failures, warnings", [
    ("dcgm4-pass", (), ()),
    ("dcgm4-warn", (), (
        "DCGM level 2 Integration/pcie on GPU 0: Fail, only errors DCGM says to watch: "
        "Temperature 91 of GPU 0 exceeded user-specified maximum allowed temperature 87 (DCGM "
        "error id 42 DCGM_FR_TEMP_VIOLATION, DCGM_ERROR_MONITOR)",)),
    # XID 94, DCGM_ERROR_MONITOR in DCGM's table and exit 226: dcgmi counts it a failure,
    # and so does burnin.
    ("dcgm4-contained", (
        "DCGM level 2 Integration/pcie on GPU 0: Fail: GPU had a contained error. (DCGM error "
        "id 131 DCGM_FR_CONTAINED_ERROR, DCGM_ERROR_MONITOR)",), ()),
    ("dcgm4-fail", (
        "DCGM level 2 Hardware/memory on GPU 1: Fail: A memory mismatch was detected on GPU "
        "1, but no error was reported by CUDA or NVML. (DCGM error id 58, DCGM_ERROR_ISOLATE)",
    ), ()),
    ("dcgm3-fail", (
        "DCGM level 2 Hardware/GPU Memory on GPU 1: Fail: A memory mismatch was detected on "
        "GPU 1, but no error was reported by CUDA or NVML. (DCGM error id 58, "
        "DCGM_ERROR_ISOLATE)",), ()),
    # DCGM 3's Deployment tests write the text under "warnings" and the GPU as a number.
    ("dcgm3-row-remap", (
        "DCGM level 1 Deployment/Page Retirement/Row Remap on GPU 0: Fail: GPU 0 had memory "
        "errors and row remappings are pending (DCGM error id 85, DCGM_ERROR_RESET)",), ()),
])
def test_dcgms_own_documents_are_judged_by_severity_and_exit_status(tmp_path, name,
                                                                    failures, warnings):
    f = fixture(name)
    out = probe(from_fixture(tmp_path, name), level=int(f["argv"][2]))
    assert out.ok, out.reason
    assert out.data["figures"]["exit_status"] == f["exit_status"]
    v = verdict(out)
    assert (v.failures, v.warnings) == (failures, warnings)


def test_the_probe_reads_dcgm_4_entities_summaries_and_dcgm_3_gpu_ids():
    dcgm = probe_module()
    four = fixture("dcgm4-fail")["stdout"]
    assert [(r["test"], r["gpu"], r["entity_group"], r["status"]) for r in dcgm.parse(four)] == [
        ("software", "0", "GPU", "Pass"), ("software", "1", "GPU", "Pass"),
        ("memory", "0", "GPU", "Pass"), ("memory", "1", "GPU", "Fail"),
        ("pcie", "0", "GPU", "Pass"), ("pcie", "1", "GPU", "Pass")], \
        "4.6 repeats GPU 1's error in the test summary: not a second result"
    three = dcgm.parse(fixture("dcgm3-fail")["stdout"])
    assert [(r["test"], r["gpu"]) for r in three if r["gpu"] is not None] == [
        ("PCIe", "0"), ("PCIe", "1"), ("GPU Memory", "0"), ("GPU Memory", "1")]
    assert three[-1]["warnings"] == [{
        "message": "A memory mismatch was detected on GPU 1, but no error was reported by "
                   "CUDA or NVML.", "error_id": 58, "category": 10, "severity": 2}]
    assert dcgm.version_of(fixture("dcgm3-fail")["stdout"]) == "3.3.9"
    assert dcgm.version_of(four) == "4.6.0"


def test_a_failing_test_summary_is_judged_with_its_own_warnings():
    """DCGM 4 puts an error of no entity only in the test summary: with a GPU's MONITOR
    warning beside it, a RESET there still fails the node; a summary that fails with no
    result and no warning fails too."""
    dcgm = probe_module()
    hot = {"error_category": 9, "error_id": 42, "error_severity": 1, "warning": "hot"}
    nccl = {"error_category": 16, "error_id": 129, "error_severity": 6, "warning": "NCCL"}
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "nccl_tests", "results": [{"entity_group": "GPU", "entity_group_id": 1,
                                            "entity_id": 0, "status": "Fail",
                                            "warnings": [hot]}],
         "test_summary": {"status": "Fail", "warnings": [hot, nccl]}},
        {"name": "targeted_power", "results": [], "test_summary": {"status": "Fail"}}]}]}}
    results = dcgm.parse(doc)
    assert [(r["test"], r["gpu"], [w["error_id"] for w in r["warnings"]]) for r in results] \
        == [("nccl_tests", "0", [42]), ("nccl_tests", None, [129]),
            ("targeted_power", None, [None])]
    failures, warnings = judged(*results)
    assert failures == (
        "DCGM level 2 Hardware/nccl_tests: Fail: NCCL (DCGM error id 129, DCGM_ERROR_RESET)",
        "DCGM level 2 Hardware/targeted_power: Fail: DCGM's test summary says so; no result "
        "names an entity (no severity given)")
    assert warnings == ("DCGM level 2 Hardware/nccl_tests on GPU 0: Fail, only errors DCGM "
                        f"says to watch: {HOT}",)


def test_dcgms_own_words_fail_the_node_where_no_result_does(tmp_path):
    """A runtime error (DCGM could not run its diagnostic) and a failing CPU entity
    (DCGM 4's CPU diagnostic) each fail, in DCGM's own words and naming the entity as
    DCGM does."""
    cases = {
        "runtime": ({"DCGM Diagnostic": {"runtime_error": "Unable to create a group of GPUs",
                                         "version": "4.6.0"}}, 226,
                    ["probe error: dcgmi diag: runtime error: Unable to create a group of "
                     "GPUs"]),
        "cpu": ({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
            {"name": "cpu_eud", "test_summary": {"status": "Fail"}, "results": [
                {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 0,
                 "status": "Fail", "warnings": [
                     {"error_category": 15, "error_id": 101, "error_severity": 2,
                      "warning": "CPU 0 failed its EUD"}]}]}]}]}}, 205,
                ["DCGM level 1 Hardware/cpu_eud on CPU 0: Fail: CPU 0 failed its EUD "
                 "(DCGM error id 101, DCGM_ERROR_ISOLATE)"]),
    }
    for name, (doc, status, expected) in cases.items():
        out = probe(fake_dcgmi(tmp_path, name, doc, status))
        assert out.ok, out.reason
        assert list(verdict(out).failures) == expected, name


# What dcgmi prints when a signal stopped its diagnostic (Diag::RunDiagOnce, DCGM 4.6:
# DCGM_ST_NVVS_KILLED = -53, exit 203, and errorString's words for it).
KILLED = {"DCGM Diagnostic": {"runtime_error": "Error: Unable to complete diagnostic. Return: "
                                               "(-53) : The DCGM diagnostic was killed by a "
                                               "signal", "version": "4.6.0"}}


def hanging_dcgmi(tmp_path: Path, on_term: str) -> str:
    """A dcgmi whose diagnostic never ends by itself; on SIGTERM it runs `on_term` (as
    real dcgmi stops its diagnostic, prints KILLED and exits 203), and it says when it
    has started."""
    killed = tmp_path / "killed.json"
    killed.write_text(json.dumps(KILLED))
    return script(tmp_path / "hanging-dcgmi", f"""\
sleep 30 & pid=$!
trap 'kill $pid; {on_term.format(tmp=tmp_path, killed=killed)}' TERM
echo started > {tmp_path}/started
wait $pid
""")


@pytest.mark.parametrize("timeout_s", [6, 60, 900, 1800, 7200])
def test_the_probe_gives_up_on_dcgmi_before_the_controller_gives_up_on_the_probe(timeout_s):
    """The controller SIGKILLs the probe's group at timeout_s, dcgmi with it, which leaves
    nvvs running: dcgmi's deadline and its grace after SIGTERM (long enough for the 25 s
    dcgmi waits for nvvs) end before it, with as long again left to report."""
    run_s, grace_s = probe_module().deadlines(timeout_s)
    assert 0 < run_s and run_s + 2 * grace_s <= timeout_s
    if timeout_s >= 900:  # the profiles' timeouts
        assert grace_s >= 25 and timeout_s - run_s <= 60
    assert probe_module().deadlines(900) == (840, 30)


def test_dcgmi_past_the_probes_deadline_gets_sigterm_and_the_probe_reports(tmp_path):
    dcgmi = hanging_dcgmi(tmp_path, "echo TERM > {tmp}/signal; sleep 0.3; cat {killed}; "
                                    "exit 203")
    out = probe(dcgmi, timeout_s=6)
    assert out.ok, f"the controller had to stop the probe: {out.reason}"
    assert (tmp_path / "signal").read_text() == "TERM\n"
    figures = out.data["figures"]
    assert (figures["stopped"], figures["exit_status"], figures["deadline_s"]) == (
        "SIGTERM", 203, 4.5)
    assert verdict(out).failures == (
        "dcgmi diag did not finish within the probe's deadline of 4.5 s (the check's "
        "timeout_s, less time to stop and report); stopped with SIGTERM, on which dcgmi "
        "stops the diagnostic",
        "probe error: dcgmi diag: runtime error: Error: Unable to complete diagnostic. "
        "Return: (-53) : The DCGM diagnostic was killed by a signal")


def test_dcgmi_deaf_to_sigterm_is_killed_after_its_grace_and_the_verdict_says_so(tmp_path):
    dcgmi = script(tmp_path / "deaf-dcgmi", "trap '' TERM\nexec sleep 30\n")
    out = probe(dcgmi, timeout_s=8)
    assert out.ok, f"the controller had to stop the probe: {out.reason}"
    assert (out.data["figures"]["stopped"], out.data["figures"]["exit_status"]) == (
        "SIGKILL", -9)
    assert verdict(out).failures == (
        "dcgmi diag did not finish within the probe's deadline of 6 s (the check's timeout_s, "
        "less time to stop and report); it did not stop within 1 s of SIGTERM and was killed "
        "(SIGKILL): nvvs may still be running on the GPUs",)


def test_a_probe_stopped_by_the_controller_lets_dcgmi_stop_its_diagnostic(tmp_path):
    """Cancelled (Ctrl-C, or its timeout), the controller SIGTERMs the probe's group, then
    SIGKILLs what is left once the probe is gone: the probe stays until dcgmi, which got
    the SIGTERM too, has stopped the diagnostic (here, half a second later)."""
    dcgmi = hanging_dcgmi(tmp_path, "sleep 0.5; echo stopped > {tmp}/stopped; exit 203")
    cancel = threading.Event()
    ran = threading.Thread(target=probe, args=(dcgmi,), kwargs={"cancel": cancel,
                                                                "lifeline": True})
    ran.start()
    waited = time.monotonic()
    while not (tmp_path / "started").exists() and time.monotonic() - waited < 30:
        time.sleep(0.05)
    cancel.set()
    ran.join(60)
    assert not ran.is_alive()
    assert (tmp_path / "stopped").exists(), "dcgmi was killed before it stopped nvvs"


def test_dcgmi_outliving_a_killed_probe_still_stops_its_diagnostic(tmp_path):
    """A probe killed outright (the OOM killer, kill -9) cannot stop dcgmi itself: the
    kernel sends dcgmi SIGTERM for it, not probelib's SIGKILL, so dcgmi stops nvvs."""
    dcgmi = hanging_dcgmi(tmp_path, "sleep 0.5; echo stopped > {tmp}/stopped; exit 203")
    proc = subprocess.Popen([sys.executable, str(REPO / "probes" / "dcgm.py")],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.stdin.write(json.dumps({"settings": {"dcgmi": dcgmi}}).encode() + b"\n")
        proc.stdin.flush()
        waited = time.monotonic()
        while not (tmp_path / "started").exists() and time.monotonic() - waited < 30:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        while not (tmp_path / "stopped").exists() and time.monotonic() - waited < 40:
            time.sleep(0.05)
        assert (tmp_path / "stopped").exists(), "dcgmi died with the probe"
    finally:
        # Whatever of the test's own group is left, while something of it may be: once
        # dcgmi has stopped, the group is empty and its number free for another test's
        # new session (an srun step), which a SIGKILL to it would take down.
        if not (tmp_path / "stopped").exists():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
