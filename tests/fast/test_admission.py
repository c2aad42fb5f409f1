"""burnin/gate/admit.py in-process: what a junit.xml lets into production, decided fail closed.
(tests/test_admit.py runs `burnin admit` itself against the same kinds of reports.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from burnin.checks import CHECKS
from burnin.gate.admit import Decision, Report, ReportError, decide, read_junit, write_admitted

PROPS = {"cluster": "c", "run_id": "r1", "burnin_report": "1", "complete": "true",
         "nodes_in_run": "2", "gpus": "0"}
CPU_CHECKS = ["health", "memory", "sdc", "burn", "storage", "allreduce", "collectives", "train",
              "fabric", "allreduce_internode", "collectives_internode", "train_internode"]
GPU_CHECKS = ["health", "pcie", "gpupairs", "memory", "dcgm", "sdc", "burn", "storage",
              "allreduce", "collectives", "train", "fabric", "hca", "allreduce_internode",
              "collectives_internode", "train_internode"]


def suite(node: str, *cases: str, **props: str | None) -> str:
    merged = {k: v for k, v in {**PROPS, **props}.items() if v is not None}
    properties = "".join(f'<property name="{k}" value="{v}"/>' for k, v in merged.items())
    return (f'<testsuite name="{node}"><properties>{properties}</properties>' + "".join(cases)
            + "</testsuite>")


def ok(check: str) -> str:
    return f'<testcase name="{check}" classname="suites.test_{check}"/>'


def bad(check: str, tag: str, message: str | None = "why", text: str = "") -> str:
    attr = "" if message is None else f' message="{message}"'
    return f'<testcase name="{check}"><{tag}{attr}>{text}</{tag}></testcase>'


def write(tmp_path: Path, *suites: str, root: str = "testsuites") -> Path:
    path = tmp_path / "junit.xml"
    path.write_text(f"<?xml version='1.0'?>\n<{root}>" + "".join(suites) + f"</{root}>")
    return path


def report(tmp_path, *suites, **kw) -> Report:
    return read_junit(write(tmp_path, *suites), **kw)


# --- what a node must pass --------------------------------------------------------

def test_every_check_that_applies_to_a_cpu_node_is_required(tmp_path):
    r = report(tmp_path, suite("n1", ok("health")), suite("n2", ok("health")))
    assert r.required("n1") == CPU_CHECKS


def test_an_unknown_gpu_count_counts_as_gpus(tmp_path):
    """The run never learned the count: fail closed, every GPU check is required."""
    r = report(tmp_path, suite("n1", ok("health"), gpus="unknown"),
               suite("n2", ok("health"), gpus=None), suite("n3", ok("health"), gpus="8"),
               suite("n4", ok("health"), gpus="-1"))
    assert r.required("n1") == GPU_CHECKS
    assert r.required("n2") == GPU_CHECKS, "no gpus property at all: unknown"
    assert r.required("n3") == GPU_CHECKS
    assert r.required("n4") == GPU_CHECKS, "not a count: unknown"
    assert r.required("absent") == GPU_CHECKS


def test_an_unknown_gpu_count_keeps_out_a_node_that_passed_only_the_cpu_checks(tmp_path):
    r = report(tmp_path, suite("n1", *map(ok, CPU_CHECKS), gpus="unknown"),
               suite("n2", *map(ok, CPU_CHECKS), gpus="0"))
    assert decide(r) == [Decision("n1", False, ("pcie: no testcase", "gpupairs: no testcase",
                                                "dcgm: no testcase", "hca: no testcase")),
                         Decision("n2", True, ())]


def test_the_runs_size_decides_whether_the_internode_allreduce_is_required(tmp_path):
    lone = report(tmp_path, suite("n1", ok("health"), nodes_in_run="1"))
    assert lone.required("n1") == CPU_CHECKS[:-3]  # no group check
    two = report(tmp_path, suite("n1", ok("health"), nodes_in_run="2"))
    assert two.required("n1") == CPU_CHECKS
    # Without the property, the report's own testsuites are the run.
    assert report(tmp_path, suite("n1", ok("h"), nodes_in_run=None)).required("n1") == \
        CPU_CHECKS[:-3]
    assert report(tmp_path, suite("n1", ok("h"), nodes_in_run=None),
                  suite("n2", ok("h"), nodes_in_run=None)).required("n1") == CPU_CHECKS
    assert report(tmp_path, suite("n1", ok("h"), nodes_in_run=""),
                  suite("n2", ok("h"), nodes_in_run="")).required("n1") == CPU_CHECKS
    assert report(tmp_path, suite("n1", ok("h"), nodes_in_run="0"),
                  suite("n2", ok("h"), nodes_in_run="0")).required("n1") == CPU_CHECKS
    # Not a count (a report edited by hand): as if the report did not say.
    assert report(tmp_path, suite("n1", ok("h"), nodes_in_run="x"),
                  suite("n2", ok("h"), nodes_in_run="-1")).required("n1") == CPU_CHECKS
    assert report(tmp_path, suite("n1", ok("h"), nodes_in_run="two")).required("n1") == \
        CPU_CHECKS[:-3]
    assert report(tmp_path, suite("n1", ok("h"), nodes_in_run="\u00b2")).required("n1") == \
        CPU_CHECKS[:-3], "a digit int() does not read (superscript two)"
    assert report(tmp_path, suite("n1", ok("h"), gpus="\u00b2")).required("n1") == GPU_CHECKS


def test_a_check_whose_tool_the_node_lacks_is_not_required(tmp_path):
    r = report(tmp_path, suite("n1", ok("h"), gpus="8", equipped_checks=""),
               suite("n2", ok("h"), gpus="8", equipped_checks="dcgm"),
               suite("n3", ok("h"), gpus="8", equipped_checks="unknown"),
               suite("n4", ok("h"), gpus="8", equipped_checks=",fabric,"))
    no_tools = [c for c in GPU_CHECKS if c not in ("dcgm", "hca")]
    no_hca = [c for c in GPU_CHECKS if c != "hca"]
    assert r.required("n1") == no_tools
    assert r.required("n2") == no_hca
    assert r.required("n3") == GPU_CHECKS, "unknown: every tool counts as found"
    assert r.required("n4") == no_tools
    both = report(tmp_path, suite("n1", ok("h"), gpus="8", equipped_checks="fabric,dcgm,hca"))
    assert both.required("n1") == GPU_CHECKS


def test_the_inventorys_admission_require_recorded_in_the_report_wins(tmp_path):
    r = report(tmp_path, suite("n1", ok("health"), admission_require="health,sdc"),
               suite("n2", ok("health"), admission_require=""))
    assert r.required("n1") == ["health", "sdc"]
    assert r.required("n2") == CPU_CHECKS, "empty: the table's"


# --- reading a report -------------------------------------------------------------

def test_read_junit_keeps_every_testcase_and_its_outcome(tmp_path):
    """Each <failure>, <error> and <skipped> element read as its Outcome
    (burnin/model/outcome.py)."""
    r = report(tmp_path,
               suite("n1", ok("health"), bad("sdc", "failure", "GPU 3 wrong"),
                     bad("burn", "error", None, "  a traceback\n "),
                     bad("storage", "skipped", "  busy  "), bad("pcie", "failure", "")),
               suite("n2", ok("health")))
    assert r.cases == {"n1": [("health", "passed", ""), ("sdc", "failed", "GPU 3 wrong"),
                              ("burn", "error", "a traceback"), ("storage", "skipped", "busy"),
                              ("pcie", "failed", "")],
                       "n2": [("health", "passed", "")]}
    assert r.properties["n1"] == PROPS and r.properties["n2"] == PROPS


def test_the_first_outcome_tag_in_failure_error_skipped_order_wins(tmp_path):
    case = '<testcase name="sdc"><skipped message="s"/><error message="e"/></testcase>'
    assert report(tmp_path, suite("n1", case)).cases["n1"] == [("sdc", "error", "e")]


def test_a_lone_testsuite_root_is_read(tmp_path):
    path = tmp_path / "one.xml"
    path.write_text(suite("n1", ok("health")))
    assert read_junit(path).cases == {"n1": [("health", "passed", "")]}


def test_a_property_without_a_value_is_empty(tmp_path):
    text = suite("n1", ok("health")).replace(
        "<properties>", '<properties><property name="gpus"/>', 1).replace(
        '<property name="gpus" value="0"/>', "")
    path = tmp_path / "j.xml"
    path.write_text(text)
    r = read_junit(path)
    assert r.properties["n1"]["gpus"] == ""
    assert r.required("n1") == GPU_CHECKS


def test_duplicate_testsuites_of_a_node_add_up(tmp_path):
    r = report(tmp_path, suite("n1", ok("health")), suite("n1", bad("health", "failure")),
               suite("n2", ok("health"), gpus="4"))
    assert r.cases["n1"] == [("health", "passed", ""), ("health", "failed", "why")]
    assert r.properties["n1"] == PROPS, "the first testsuite's properties"


def bad_input(tmp_path, *suites, root="testsuites", strict=True) -> str:
    with pytest.raises(ReportError) as e:
        read_junit(write(tmp_path, *suites, root=root), strict=strict)
    return str(e.value)


def test_what_is_not_a_complete_burnin_report_is_bad_input(tmp_path):
    p = tmp_path / "junit.xml"
    assert bad_input(tmp_path, root="html") == f"{p}: the root element is <html>, expected " \
                                               "<testsuites>"
    assert bad_input(tmp_path) == f"{p}: no <testsuite>, so no node to admit"
    assert bad_input(tmp_path, suite("", ok("health"))) == \
        f"{p}: a <testsuite> without a name (the node)"
    assert bad_input(tmp_path, suite("n1", '<testcase classname="x"/>')) == \
        f"{p}: node n1: a <testcase> without a name"
    assert bad_input(tmp_path, suite("n1"), suite("n2")) == \
        f"{p}: no <testcase> at all, so no check passed"
    assert bad_input(tmp_path, suite("n1", ok("health")), suite("n2", ok("health"),
                                                                run_id="r2")) == \
        f"{p}: testsuites of different runs in one report"
    assert bad_input(tmp_path, suite("n1", ok("health"), burnin_report=None)) == (
        f"{p}: not a report burnin wrote (node n1's testsuite has no burnin_report property; "
        "pytest's own --junitxml is not the admission contract: use "
        "reports/<run-id>/junit.xml)")
    assert bad_input(tmp_path, suite("n1", ok("health"), run_id=None)) == \
        f"{p}: node n1's testsuite has no run_id"
    assert bad_input(tmp_path, suite("n1", ok("health"), complete="false",
                                     incomplete="interrupted by SIGTERM")) == \
        f"{p}: run r1 did not complete (interrupted by SIGTERM); run it again"
    assert bad_input(tmp_path, suite("n1", ok("health"), complete=None, exit_status="3")) == \
        f"{p}: run r1 did not complete (interrupted, exit status 3); run it again"
    assert bad_input(tmp_path, suite("n1", ok("health"), complete="yes")) == \
        f"{p}: run r1 did not complete (interrupted, exit status ?); run it again"


def test_two_testsuites_of_one_node_from_different_runs_are_bad_input(tmp_path):
    """Reports of two runs pasted together: the node passed health in one run and sdc in
    the other, and no run passed it on both."""
    assert bad_input(tmp_path, suite("n1", ok("health"), **REQ),
                     suite("n1", ok("sdc"), run_id="r2", **REQ)).endswith(
        "testsuites of different runs in one report")


def test_read_junit_trusts_only_a_complete_burnin_report_by_default(tmp_path):
    with pytest.raises(ReportError, match="did not complete"):
        read_junit(write(tmp_path, suite("n1", ok("health"), complete="false")))


def test_an_interrupted_run_is_read_for_re_rendering_only_when_asked(tmp_path):
    r = report(tmp_path, suite("n1", ok("health"), complete="false", burnin_report=None),
               strict=False)
    assert r.cases == {"n1": [("health", "passed", "")]}
    # ...but never across runs
    assert bad_input(tmp_path, suite("n1", ok("h"), complete="false"),
                     suite("n2", ok("h"), run_id="r9"), strict=False).endswith(
        "testsuites of different runs in one report")


def test_a_missing_unreadable_or_truncated_file_is_bad_input(tmp_path):
    with pytest.raises(ReportError, match=r"nope.xml: no such file$"):
        read_junit(tmp_path / "nope.xml")
    with pytest.raises(ReportError, match=r": cannot read: \[Errno 21\] Is a directory"):
        read_junit(tmp_path)
    cut = tmp_path / "cut.xml"
    cut.write_text("<testsuites><testsuite name='n1'>")
    with pytest.raises(ReportError, match=r"cut.xml: not well-formed XML \(.+\); a truncated "
                                          r"report\?$"):
        read_junit(cut)


# --- deciding ---------------------------------------------------------------------

REQ = {"admission_require": "health,sdc"}


def test_a_node_is_admitted_only_with_exactly_one_passed_testcase_per_required_check(
        tmp_path):
    r = report(tmp_path,
               suite("ok", ok("health"), ok("sdc"), bad("burn", "failure"), **REQ),
               suite("fail", ok("health"), bad("sdc", "failure", "GPU 3 wrong"), **REQ),
               suite("err", bad("health", "error", None), ok("sdc"), **REQ),
               suite("skip", ok("health"), bad("sdc", "skipped", "busy"), **REQ),
               suite("missing", ok("health"), **REQ),
               suite("twice", ok("health"), ok("sdc"), ok("sdc"), **REQ))
    assert decide(r) == [
        Decision("ok", True, ()),
        Decision("fail", False, ("sdc: failure: GPU 3 wrong",)),
        Decision("err", False, ("health: error",)),
        Decision("skip", False, ("sdc: skipped: busy",)),
        Decision("missing", False, ("sdc: no testcase",)),
        Decision("twice", False, ("sdc: 2 testcases, expected one",)),
    ]


def test_a_long_message_is_cut_at_300_characters(tmp_path):
    r = report(tmp_path, suite("n1", ok("health"), bad("sdc", "failure", "x" * 400), **REQ))
    assert decide(r)[0].reasons == ("sdc: failure: " + "x" * 300,)


def test_require_overrides_the_inventory_which_overrides_the_report(tmp_path):
    r = report(tmp_path, suite("n1", ok("health"), ok("sdc"), **REQ),
               suite("n2", ok("health"), **REQ))
    assert decide(r, required=["health"]) == [Decision("n1", True), Decision("n2", True)]
    assert decide(r, inventory_require=["health", "burn"]) == [
        Decision("n1", False, ("burn: no testcase",)),
        Decision("n2", False, ("burn: no testcase",))]
    assert decide(r, required=["health"], inventory_require=["burn"]) == [
        Decision("n1", True), Decision("n2", True)]
    assert decide(r, required=["helth"])[0].reasons == \
        ("helth: no testcase (not a check burnin knows)",)


def test_the_inventory_adds_the_nodes_the_report_lacks_and_refuses_strangers(tmp_path):
    r = report(tmp_path, suite("n1", ok("health"), ok("sdc"), **REQ),
               suite("x9", ok("health"), ok("sdc"), **REQ))
    assert decide(r, inventory_nodes=["n2", "n1"]) == [
        Decision("n2", False, ("no testsuite in the report",)),
        Decision("n1", True, ()),
        Decision("x9", False, ("not in the inventory",))]
    assert decide(r, inventory_nodes=[]) == [
        Decision("n1", False, ("not in the inventory",)),
        Decision("x9", False, ("not in the inventory",))]


def test_a_node_in_quarantine_is_refused_whatever_the_report_says(tmp_path):
    r = report(tmp_path, suite("n1", ok("health"), ok("sdc"), **REQ),
               suite("n2", ok("health"), **REQ))
    assert decide(r, quarantined={"n1": "burn: XID 79", "n3": "x"}) == [
        Decision("n1", False, ("in quarantine: burn: XID 79",)),
        Decision("n2", False, ("sdc: no testcase",))]
    assert decide(r, quarantined={}) == decide(r)


def test_every_reason_is_given_not_only_the_first(tmp_path):
    r = report(tmp_path, suite("n1", bad("health", "failure", "ECC off"), **REQ))
    assert decide(r, quarantined={"n1": "held"}) == [Decision(
        "n1", False, ("in quarantine: held", "health: failure: ECC off", "sdc: no testcase"))]


def test_the_admitted_file_lists_the_admitted_only(tmp_path):
    out = tmp_path / "admitted.txt"
    write_admitted(out, [Decision("n1", True), Decision("n2", False, ("x",)),
                         Decision("n3", True)])
    assert out.read_text() == "n1\nn3\n"
    write_admitted(out, [Decision("n2", False, ("x",))])
    assert out.read_text() == ""


def test_the_checks_of_the_table_are_the_ones_required():
    assert set(GPU_CHECKS) == set(CHECKS)
