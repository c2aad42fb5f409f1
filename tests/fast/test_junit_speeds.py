"""The relative speeds summary.html and metrics.prom show are junit.xml's, read by a
lean pass over the file: the same as the admission reader's properties say."""

from __future__ import annotations

from burnin.gate.admit import read_junit
from burnin.model.outcome import CaseResult
from burnin.report.junit import junit_speeds, write_junit


def by_admit(path):
    out = {}
    for node, props in read_junit(path, strict=False).properties.items():
        try:
            out[node] = (float(props.get("relative_speed", "")),
                         props.get("speed_set_by", "").split(":")[0])
        except ValueError:
            continue
    return out


def test_the_speeds_are_what_the_admission_reader_reads(tmp_path):
    nodes = [(f"n{i}", f"10.0.0.{i}") for i in range(5)]
    cases = {(n, "burn"): CaseResult(n, "burn") for n, _ in nodes}
    props = {"n0": {"relative_speed": "0.9731", "speed_set_by": "burn: burn TFLOPS cuda:3 "
                    "680.1 against the fleet's median 699"},
             "n1": {"relative_speed": "1.0000", "speed_set_by": "storage: read stream 2"},
             "n2": {"relative_speed": "fast"},        # not a number: no speed
             "n3": {"speed_set_by": "burn: x"}}      # no speed stated
    path = tmp_path / "junit.xml"
    write_junit(path, "c", "r", nodes, cases, {"burnin": "1"}, props)
    got = junit_speeds(path)
    assert got == {"n0": (0.9731, "burn"), "n1": (1.0, "storage")} == by_admit(path)
    assert junit_speeds(tmp_path / "none.xml") == {}
