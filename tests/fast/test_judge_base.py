"""burnin/checks/base.py: what a check is, who votes in the fleet, what applies where."""

from __future__ import annotations

import pytest
from support.judging import H100, failed, outcome

from burnin.checks import CHECKS, applicable, resolve_settings
from burnin.checks.base import (
    Check,
    Figure,
    Fleet,
    Judging,
    Setting,
    count_problem,
    device_name,
    implausible,
    timeout,
)
from burnin.model.gpu_reference import GpuModel
from burnin.probe.protocol import DEFAULT_MAX_OUTPUT
from burnin.probe.shapes import Obj


def test_a_setting_has_a_default_per_profile_or_one_for_all():
    s = Setting("int", {"quick": 1, "standard": 2, "extended": 3})
    assert [s.value_for(p) for p in ("quick", "standard", "extended")] == [1, 2, 3]
    assert Setting("int", 7).value_for("quick") == 7
    assert Setting("int").value_for("quick") is None
    t = timeout(1, 2, 3)
    assert (t.kind, t.default, t.doc) == ("positive", {"quick": 1, "standard": 2,
                                                       "extended": 3},
                                          "seconds before the probe's process group is killed")


def test_a_figure_is_better_higher_or_lower_and_nothing_else():
    assert Figure("m", (), 1.0, "h").better == "higher"
    assert Figure("m", (), 1.0, "h", better="lower").better == "lower"
    with pytest.raises(ValueError, match="Figure m: better must be 'higher' or 'lower'"):
        Figure("m", (), 1.0, "h", better="more")


def test_only_nodes_reporting_their_real_device_count_vote():
    o1 = outcome("sdc", [{}], node="n1")
    o2 = outcome("sdc", [{}] * 20, node="n2")
    o3 = outcome("sdc", [{}, {}], node="n3")
    o4 = failed("sdc", "down", node="n4")
    o5 = outcome("sdc", [], node="n5")
    fleet = Fleet({"n1": o1, "n2": o2, "n3": o3, "n4": o4, "n5": o5},
                  devices={"n1": 1, "n2": 1, "n4": 1, "n5": 0})
    assert list(fleet.voters()) == [("n1", o1), ("n3", o3), ("n5", o5)], \
        "n2 claims 20 of its 1; n3's count is unknown; n4 did not run"
    assert list(Fleet({"n1": o1, "n2": o2}).voters()) == [("n1", o1), ("n2", o2)]


def test_count_problem_names_the_count_reported_and_expected():
    j = Judging(settings={}, devices=2)
    assert count_problem([{}, {}], j) == []
    assert count_problem([{}], j) == [
        "the probe reported 1 device(s), expected 2 (the inventory's count, or what the "
        "node's health facts showed)"]
    assert count_problem([{}] * 3, j)[0].startswith("the probe reported 3 device(s), expected 2")
    assert count_problem([{}] * 3, Judging(settings={})) == []
    assert count_problem([], Judging(settings={}, devices=0)) == []


def test_device_name():
    assert device_name({"device": "cuda:0", "name": "H100", "uuid": "GPU-1"}) == \
        "cuda:0 (H100, GPU-1)"
    assert device_name({"device": "cuda:0", "name": "H100"}) == "cuda:0 (H100)"
    assert device_name({"device": "cuda:0", "uuid": "GPU-1", "name": ""}) == "cuda:0 (GPU-1)"
    assert device_name({"device": "cpu:0"}) == "cpu:0"
    assert device_name({}) == "None"


def test_implausible():
    assert implausible(1050.0, H100) == ""
    assert implausible(1050.5, H100) == ("implausible: 1050.5 TFLOPS is beyond the H100's "
                                         "peak of 1000 TFLOPS")
    assert implausible(1e9, None) == ""
    assert implausible(1e9, GpuModel("X", ())) == ""
    assert implausible("fast", H100) == "" and implausible(None, H100) == ""
    assert implausible(2000, H100).startswith("implausible: 2000.0 TFLOPS")


def bare(**kw) -> Check:
    return Check(name="x", doc="d", judge=lambda *a: None, schema=Obj(), **kw)


def test_a_check_applies_by_gpus_run_size_and_tools():
    gpu_only, group = bare(gpu_only=True), bare(execute=lambda run: {})
    tooled = bare(tool=lambda s: "dcgmi")
    assert not gpu_only.applies(0, 1) and gpu_only.applies(None, 1) and gpu_only.applies(8, 1)
    assert not group.applies(8, 1) and group.applies(8, 2) and group.applies(0, 2)
    assert group.group and not gpu_only.group
    assert tooled.applies(8, 1) and tooled.applies(8, 1, frozenset({"x"}))
    assert not tooled.applies(8, 1, frozenset())
    assert bare().applies(0, 1, frozenset()), "a check needing no tool is not held to one"


def test_applicable_follows_the_table():
    assert applicable(0, 1) == ["health", "memory", "sdc", "burn", "storage", "allreduce",
                                "collectives", "train", "fabric"]
    assert applicable(8, 2, frozenset()) == ["health", "pcie", "gpupairs", "memory", "sdc",
                                             "burn", "storage", "allreduce", "collectives",
                                             "train", "fabric", "allreduce_internode",
                                             "collectives_internode", "train_internode"]
    assert applicable(None, 2) == list(CHECKS)


def test_resolve_takes_the_profile_then_each_override_and_derives_the_timeout():
    c = bare(settings={"duration_s": Setting("positive", {"quick": 10, "standard": 60,
                                                          "extended": 300}),
                       "timeout_s": Setting("positive", None), "n": Setting("int", 64)})
    assert c.resolve("quick") == {"duration_s": 10, "timeout_s": 320, "n": 64}
    assert c.resolve("extended", {"n": 128}, None, {"n": 256, "x": 1}) == {
        "duration_s": 300, "timeout_s": 900, "n": 256, "x": 1}
    assert c.resolve("quick", {"timeout_s": 5}) == {"duration_s": 10, "timeout_s": 5, "n": 64}
    assert bare().resolve("quick") == {"timeout_s": 300}
    assert resolve_settings("sdc", "standard")["timeout_s"] == 420


def test_the_output_bound_and_schema_may_depend_on_the_nodes_settings():
    plain = bare(max_output=123)
    assert plain.output_limit({}, 8) == 123 and bare().output_limit({}, 8) == DEFAULT_MAX_OUTPUT
    assert plain.schema_for({}, 8) is plain.schema
    shaped = Obj(a=Obj())
    bound = bare(output_bound=lambda s, d: s["k"] * (d or 1000),
                 schema_bound=lambda s, d: shaped if (s["k"], d) == (2, 8) else None)
    assert bound.output_limit({"k": 2}, 8) == 16 and bound.output_limit({"k": 2}, None) == 2000
    assert bound.schema_for({"k": 2}, 8) is shaped and bound.schema_for({"k": 2}, 4) is None
    assert bare(probe="other").probe_name == "other" and bare().probe_name == "x"


def test_a_measure_names_its_family_label_chart_and_key_from_the_figures_labels():
    from burnin.checks.base import Measure, device_tflops
    m = device_tflops("burn: sustained TFLOPS per device", speed=True)
    labels = (("check", "burn"), ("device", "cuda:3"))
    assert (m.metric, m.unit, m.worst, m.per_model, m.zero, m.span, m.speed) == (
        "device_tflops", "TFLOPS", "low", True, True, 0.0, True)
    assert m.family_of(labels) == "burn TFLOPS, slowest device"
    assert m.label_of(labels) == "burn TFLOPS cuda:3"
    assert m.key_of(labels) == "burn"
    assert m.chart_of(labels) == "burn: sustained TFLOPS per device"
    assert device_tflops("x").speed is False  # sdc's: no speed a job runs at
    assert m.label_of((("check", "burn"),)) == "burn TFLOPS "  # a missing label reads as ''
    with pytest.raises(ValueError, match="Measure m: worst must be 'low' or 'high'"):
        Measure("m", "GB/s", "f", "l", worst="middle")
    hot = Measure("gpu_temp", "C", "{check} temperature", "{device}", worst="high",
                  chart="{check}: hottest first")
    assert hot.worst == "high" and hot.chart_of(labels) == "burn: hottest first"


def test_the_peer_bound_is_the_fraction_or_the_runs_spread_up_to_half():
    from burnin.checks.base import node_spread, peer_bound
    assert peer_bound(100.0, 0.01, 0.9, 6, "GB/s") == (90.0, "0.9 x 100.000 GB/s")
    assert peer_bound(100.0, None, 0.9, 6, "GB/s") == (90.0, "0.9 x 100.000 GB/s")
    bound, words = peer_bound(100.0, 0.05, 0.9, 6, "GB/s")
    assert bound == pytest.approx(70.0)
    assert words == "0.7 x 100.000 GB/s (6 x the robust spread of 5.0% below it)"
    assert peer_bound(100.0, 0.5, 0.9, 6, "GB/s")[0] == 50.0  # held at half
    assert peer_bound(100.0, 0.5, 0, 6, "GB/s")[0] == 0  # fraction 0: off
    # a spread exactly as wide as the fraction's margin: the fraction's words
    assert peer_bound(100.0, 0.25, 0.5, 2, "GB/s") == (50.0, "0.5 x 100.000 GB/s")
    # each node one vote: its devices' median deviation from the center
    assert node_spread([[90.0, 110.0], [100.0, 100.0, 100.0, 130.0]], 100.0) == \
        pytest.approx(1.4826 * 0.05)
    assert node_spread([[90.0, 110.0]]) == pytest.approx(1.4826 * 0.1)  # its own median
    assert node_spread([]) is None and node_spread([[0.0, 0.0]]) is None
