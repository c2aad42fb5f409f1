"""junit.xml is rendered one testsuite at a time (at 10,000 nodes the whole
document's trees took some 250 MB at once), and must stay the same to the byte as the
whole document through junit_xml and _completed: it is the admission contract."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from junit_xml import to_xml_report_string

from burnin.model.outcome import CaseResult, Outcome
from burnin.report import junit as reports
from burnin.report.junit import render_junit

STAMP = re.compile(r'timestamp="[^"]*"')
CLUSTER = "c<&>\"l"  # as same() renders it


def whole(cluster, run_id, nodes, cases, run_props, node_props) -> str:
    """junit.xml as it was rendered before: every testsuite in one junit_xml document."""
    by_node: dict[str, list[CaseResult]] = {}
    for (node, _), case in cases.items():
        by_node.setdefault(node, []).append(case)
    suites = [reports._suite(cluster, run_id, "T", name, address, by_node.get(name, []),
                             {**run_props, **node_props.get(name, {})})
              for name, address in nodes]
    return reports._completed(to_xml_report_string(suites, prettyprint=False,
                                                   encoding="utf-8"))


def same(nodes, cases, run_props=None, node_props=None) -> str:
    __tracebackhide__ = True
    run_props, node_props = run_props or {}, node_props or {}
    got = render_junit("c<&>\"l", "r1", nodes, cases, run_props, node_props)
    want = whole("c<&>\"l", "r1", nodes, cases, run_props, node_props)
    assert STAMP.sub("", got) == STAMP.sub("", want)
    return got


HOSTILE = ("a < b & c > \"d\" 'e'", "line one\nline two\r\nthree\rfour\ttab",
           "\x00\x01\x0b\x1f\x7f\x85\ufffe controls", "ünïcödé 🙂 \u202e bidi", "", "   ")


def test_every_outcome_and_hostile_text_render_as_the_whole_document_did():
    nodes = [("n1", "10.0.0.1"), ("n2", "n2"), ("n&3", "h\"3"), ("n4", "n4")]
    cases = {}
    for i, (node, _) in enumerate(nodes[:3]):
        for j, outcome in enumerate(Outcome):
            if outcome == Outcome.NOT_RUN:
                continue
            text = HOSTILE[(i + j) % len(HOSTILE)]
            cases[(node, f"check{j}")] = CaseResult(node, f"check{j}", outcome, text,
                                                    text * 2, text, 0.0125 * (i + j))
    out = same(nodes, cases, {"complete": "true", "why": HOSTILE[0]},
               {"n1": {"gpus": "8", "note": HOSTILE[1]}})
    assert out.count("<testsuite ") == 4  # n4, with no testcase, is there too
    assert re.search(r'<testsuites disabled="0" errors="\d+" failures="\d+" tests="12" '
                     r'time="\d+\.\d{3}" skipped="3">', out), out[:300]


def test_no_node_renders_as_the_whole_document_did():
    assert same([], {}) .endswith("<testsuites time=\"0.000\" skipped=\"0\" />\n")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(Outcome)[:4]), st.text(max_size=40),
                          st.floats(0, 1e4, allow_nan=False)), min_size=0, max_size=6))
def test_any_text_renders_as_the_whole_document_did(rows):
    nodes = [(f"n{i}", f"a{i}") for i in range(3)]
    cases = {(f"n{i % 3}", f"c{i}"): CaseResult(f"n{i % 3}", f"c{i}", o, t, t, t, d)
             for i, (o, t, d) in enumerate(rows)}
    same(nodes, cases, {"p": rows[0][1] if rows else ""})


def test_written_a_testsuite_at_a_time_the_file_is_the_rendered_text(tmp_path):
    nodes = [("n1", "n1"), ("n2", "n2"), ("n3", "n3")]
    cases = {(n, "health"): CaseResult(n, "health", Outcome.FAILED, HOSTILE[0], HOSTILE[1])
             for n, _ in nodes}
    pieces = reports.junit_pieces(CLUSTER, "r1", nodes, cases)
    assert len(pieces) == len(nodes) + 2  # the head, a piece per testsuite, the end
    reports.write_junit(tmp_path / "junit.xml", CLUSTER, "r1", nodes, cases)
    written = (tmp_path / "junit.xml").read_text(encoding="utf-8")
    assert STAMP.sub("", written) == STAMP.sub("", render_junit(CLUSTER, "r1", nodes, cases)) \
        == STAMP.sub("", "".join(pieces))
    assert STAMP.sub("", same(nodes, cases)) == STAMP.sub("", written)
