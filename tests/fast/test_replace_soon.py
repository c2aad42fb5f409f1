"""The replace-soon list (burnin/figures/replace_soon.py) on generated ledgers: a steady
trend is listed with the day it reaches its limit, a flat or noisy one is not, a counter
that resets is summed across resets, one GPU's climb is found under another's high flat
count, a counter a run did not read is no point; and the wear counters a document gives
(burnin/checks/wear.py), bounded."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burnin.checks.wear import MAX_DEVICES
from burnin.figures import replace_soon as rs
from burnin.figures import wear
from burnin.gate.quarantine import node_runs
from burnin.ledger.api import NodeRun
from burnin.model.outcome import CaseResult, Outcome

DAY = 86400.0
NOW = 1_800_000_000.0


def point(days_ago: float, speed: float | None = None, **counters) -> rs.Point:
    """A kept run `days_ago` days before NOW: counters as {name: {device: value}}; each
    named counter was read."""
    return (NOW - days_ago * DAY,
            {"wear": {c: {d: float(v) for d, v in per.items() if v} for c, per in counters.items()},
             "wear_read": sorted(counters)}, speed)


def daily(counter: str, values: list[float], device: str = "0") -> list[rs.Point]:
    """One run a day, the last today."""
    n = len(values)
    return [point(n - 1 - i, **{counter: {device: v}}) for i, v in enumerate(values)]


def listed(points: list[rs.Point], speed_floor: float | None = None) -> list[rs.Finding]:
    return rs.of_node("n1", points, NOW, speed_floor=speed_floor)


def test_a_steady_climb_is_listed_with_the_day_it_reaches_the_limit():
    # retired pages 10, 14, 18, 22, 26: 4 a day, 38 to the limit of 64: 9.5 days
    found = listed(daily("retired_pages", [10, 14, 18, 22, 26], "3"))
    assert len(found) == 1
    f = found[0]
    assert (f.counter, f.device, f.value, f.limit, f.reached) == ("retired_pages", "3", 26,
                                                                  64, False)
    assert f.per_day == pytest.approx(4)
    assert f.projected == pytest.approx(NOW + 9.5 * DAY)
    assert "GPU 3: retired pages 26" in f.reason and "limit of 64" in f.reason
    assert "docs.nvidia.com" in f.source


def test_a_flat_counter_is_not_listed_however_high():
    assert listed(daily("retired_pages", [40, 40, 40, 40, 40])) == []
    assert listed(daily("ecc_corrected", [90_000] * 6)) == []


def test_a_climb_that_reaches_its_limit_after_the_horizon_is_not_listed():
    # 1 a day from 10: 54 days to 64, inside 90; 0.5 a day: 108 days, outside
    assert listed(daily("retired_pages", [6, 7, 8, 9, 10]))
    assert listed(daily("retired_pages", [8, 8.5, 9, 9.5, 10])) == []


def test_noise_is_no_trend():
    assert listed(daily("retired_pages", [10, 30, 12, 31, 11, 29, 12])) == []
    # a line through these climbs 1.9 a day (the limit in 23 days) but explains 6% of them
    assert listed(daily("retired_pages", [10, 40, 12, 45, 15, 50, 20])) == []


def test_a_trend_away_from_its_limit_is_not_listed():
    cooling = [point(4 - i, thermal_margin={"node": 2 + 2 * i}) for i in range(5)]
    assert listed(cooling) == []
    faster = [point(4 - i, speed=0.92 + 0.01 * i) for i in range(5)]
    assert listed(faster, speed_floor=0.9) == []


def test_too_few_runs_or_one_afternoon_say_nothing():
    assert listed(daily("retired_pages", [10, 30])) == []
    afternoon = [point(i / 24, retired_pages={"0": 10 + 10 * i}) for i in range(5)]
    assert listed(afternoon) == []


def test_one_gpus_climb_is_found_under_anothers_high_flat_count():
    pts = [point(4 - i, retired_pages={"0": 50, "5": 10 + 4 * i}) for i in range(5)]
    found = listed(pts)
    assert [(f.counter, f.device) for f in found] == [("retired_pages", "5")]


def test_a_counter_that_resets_is_summed_across_resets():
    # PCIe replays grow 1,000 a day; the node rebooted every third day (the counter
    # starts again from what it counted since)
    values = [1000, 2000, 3000, 1000, 2000, 3000, 1000, 2000]
    found = listed(daily("pcie_replay", values))
    assert len(found) == 1 and found[0].value == 8000
    assert found[0].per_day == pytest.approx(1000)
    assert found[0].projected == pytest.approx(NOW + 2 * DAY)
    # the same counter taken at face value would look flat and be missed
    assert rs.summed([(0, 5), (1, 0), (2, 5)])[-1][1] == 10


def test_a_limit_already_reached_is_listed_since_the_run_that_reached_it():
    pts = [point(3), point(2, remap_failed={"1": 1}), point(1, remap_failed={"1": 1}),
           point(0, remap_failed={"1": 1})]
    [f] = listed(pts)
    assert f.reached and f.counter == "remap_failed" and f.device == "1"
    assert f.projected == NOW - 2 * DAY
    assert "at or past the limit of 1" in f.reason


def test_a_counter_a_run_did_not_read_is_no_point():
    # fabric ran on days 4, 2 and 0 only: the other days are not zeros (which would make
    # the steady NVLink CRC count look like it resets, and its sum climb)
    pts = []
    for day in range(5):
        pts.append(point(4 - day, nvlink_crc={"0": 5000}) if day % 2 == 0 else point(4 - day))
    assert listed(pts) == []
    read_as_zero = [point(4 - d, nvlink_crc={"0": 5000 if d % 2 == 0 else 0})
                    for d in range(5)]
    assert listed(read_as_zero), "read as zero, the same runs look like a climb"


def test_a_falling_margin_and_a_falling_speed_are_listed():
    margin = [point(4 - i, thermal_margin={"node": 10 - 2 * i}) for i in range(5)]
    [f] = listed(margin)
    assert f.counter == "thermal_margin" and f.projected == pytest.approx(NOW + 1 * DAY)
    speeds = [point(4 - i, speed=1.0 - 0.01 * i) for i in range(5)]
    [s] = listed(speeds, speed_floor=0.9)
    assert s.counter == "relative_speed" and s.projected == pytest.approx(NOW + 6 * DAY)
    # 0.96 falling 0.01 a day reaches 0.5 in 46 days (inside the horizon of 90), 0 in 96
    assert listed(speeds, speed_floor=0.5)
    assert listed(speeds, speed_floor=0.0) == []


def test_the_list_is_ranked_soonest_first():
    points = {"slow": daily("retired_pages", [6, 7, 8, 9, 10]),
              "soon": daily("retired_pages", [40, 45, 50, 55, 60]),
              "past": [point(0, remap_failed={"0": 1})],
              "fine": daily("retired_pages", [1, 1, 1, 1, 1])}
    ranked = rs.ranked(points, NOW)
    assert [fs[0].node for fs in ranked] == ["past", "soon", "slow"]


@settings(max_examples=200, deadline=None)
@given(start=st.floats(0, 50), per_day=st.floats(-3, 3), runs=st.integers(3, 20),
       every=st.floats(0.5, 3), noise=st.lists(st.floats(-0.01, 0.01), min_size=20,
                                              max_size=20))
def test_any_steady_trend_is_listed_exactly_when_it_reaches_the_limit_in_the_horizon(
        start, per_day, runs, every, noise):
    """A trend the list misses, or one it invents, fails here: retired pages climbing at
    any pace from any start, sampled every `every` days, with a little noise."""
    r = rs.rules()
    limit = r.limits["retired_pages"].limit
    values = [max(0.0, start + per_day * every * i + noise[i]) for i in range(runs)]
    pts = [point((runs - 1 - i) * every, retired_pages={"0": v}) for i, v in enumerate(values)]
    pts = [p for p in pts if p[0] >= NOW - r.window_days * DAY]
    found = listed(pts)
    last = values[-1]
    if last >= limit:
        assert found and found[0].reached
        return
    steady = len(pts) >= r.min_points and (len(pts) - 1) * every >= r.min_days \
        and per_day > 0.05 and values[-1] > values[0]
    if not steady:
        return  # too short or too flat to promise anything either way
    days = (limit - last) / per_day
    if days <= r.horizon_days * 0.95:
        assert found, f"missed: {last:g} climbing {per_day:g} a day reaches {limit:g} in " \
                      f"{days:.1f} days"
        assert found[0].projected == pytest.approx(NOW + days * DAY, rel=0, abs=DAY * max(
            1.0, 0.05 * days))
    elif days >= r.horizon_days * 1.05:
        assert not found, f"listed a trend {days:.0f} days from its limit"


# --- the counters a document gives, bounded ---------------------------------------------

def health_doc(devices: list[dict], xids: list[dict] | None = None) -> dict:
    return {"devices": devices, "figures": {"host": {"kernel_log": {
        "readable": True, "xids": xids or []}}}}


def test_health_gives_its_counters_per_gpu_and_the_warning_xids():
    doc = health_doc([
        {"index": 0, "pci_bus_id": "00000000:18:00.0", "ecc_corrected_aggregate": 12,
         "remapped_rows": {"correctable": 2, "uncorrectable": 3, "pending": True,
                           "failed": False}, "retired_pages": 0, "pcie_replay": 7,
         "pcie_aer_correctable": 40},
        {"index": 1, "pci_bus_id": "00000000:19:00.0", "ecc_corrected_aggregate": 0}],
        xids=[{"pci": "0000:18:00", "xid": 13}, {"pci": "0000:18:00", "xid": 31},
              {"pci": "0000:19:00", "xid": 79}, {"pci": "0000:99:00", "xid": 43}])
    kept = wear.figures([wear.of_document("health", doc)])
    assert kept["wear"] == {"ecc_corrected": {"0": 12}, "remapped_rows": {"0": 3},
                            "remap_pending": {"0": 1}, "pcie_replay": {"0": 7},
                            "pcie_aer_correctable": {"0": 40},
                            "xid_warning": {"0": 2, "node": 1}}
    assert set(kept["wear_read"]) == {"ecc_corrected", "remapped_rows", "remap_pending",
                                      "remap_failed", "retired_pages", "pcie_replay",
                                      "pcie_aer_correctable", "xid_warning"}


def test_fabric_and_burn_give_nvlink_counts_and_the_thermal_margin():
    fabric = {"devices": [{"index": 0, "nvlink": {"counters": {
        "0": {"replay": 1, "recovery": 0, "crc_flit": 2, "crc_data": 3},
        "1": {"replay": 4, "crc_flit": 5}}}}, {"index": 1, "nvlink": {"counters": {}}}]}
    burn = {"devices": [{"telemetry": {"temp_slowdown_c": 87,
                                       "series": {"temp_c": [60, 71, None]}}},
                        {"telemetry": {"temp_slowdown_c": 87, "series": {"temp_c": [75]}}}]}
    kept = wear.figures([wear.of_document("fabric", fabric), wear.of_document("burn", burn)])
    assert kept["wear"] == {"nvlink_crc": {"0": 10}, "nvlink_replay": {"0": 5},
                            "thermal_margin": {"node": 12}}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e300, True, "12", None, [1]])
def test_what_is_no_honest_count_is_not_kept(bad):
    doc = health_doc([{"index": 0, "ecc_corrected_aggregate": bad, "retired_pages": bad}])
    assert wear.figures([wear.of_document("health", doc)]).get("wear", {}) == {}


def test_a_document_of_any_shape_gives_nothing_rather_than_raising():
    for doc in (None, [], {"devices": 5}, {"devices": [5, None]},
                {"devices": [{"remapped_rows": [1]}]}, {"figures": {"host": []}},
                {"devices": [{"nvlink": {"counters": {"0": 7}}}]}):
        for check in ("health", "fabric", "burn", "sdc"):
            assert isinstance(wear.of_document(check, doc), dict)


def test_a_node_claiming_many_gpus_keeps_a_bounded_few():
    doc = health_doc([{"index": i, "ecc_corrected_aggregate": 1 + i} for i in range(500)])
    kept = wear.figures([wear.of_document("health", doc)])
    assert len(kept["wear"]["ecc_corrected"]) == MAX_DEVICES


def test_a_kept_run_read_back_keeps_only_what_could_have_been_written():
    assert wear.kept({"wear": {"x": {"0": "a", "1": 2, 3: 4}, "y": 5},
                      "wear_read": ["x", 7]}) == ({"x": {"1": 2.0}}, frozenset({"x"}))
    assert wear.kept("junk") == ({}, frozenset())
    assert not math.isnan(wear.kept({"wear": {"x": {"0": 1.0}}})[0]["x"]["0"])


# --- through the ledger ----------------------------------------------------------------

def test_the_run_keeps_each_nodes_wear_in_the_ledger_and_the_list_reads_it(new_ledger):
    ledger = new_ledger()
    for day in range(5):
        t = NOW - (4 - day) * DAY
        cases = {"n1": [CaseResult("n1", "health", Outcome.PASSED, "", "")],
                 "n2": [CaseResult("n2", "health", Outcome.PASSED, "", "")]}
        worn = {"n1": wear.figures([wear.of_document("health", health_doc(
            [{"index": 2, "retired_pages": 10 + 5 * day}]))]),
                "n2": wear.figures([wear.of_document("health", health_doc(
                    [{"index": 2, "retired_pages": 10}]))])}
        ledger.record_runs("c", node_runs(f"r{day}", cases, {}, t, worn), 90, now=t)
    assert ledger.runs("n1")[-1].figures["wear"] == {"retired_pages": {"2": 30.0}}
    ranked = rs.of_ledger(ledger, NOW)
    assert [(fs[0].node, fs[0].counter, fs[0].device) for fs in ranked] == [
        ("n1", "retired_pages", "2")]
    assert rs.of_ledger(ledger, NOW, nodes={"n2"}) == []
    # a run's own counters, not yet in the ledger, are its newest point
    current = {"n2": (NOW + DAY, {"wear": {"retired_pages": {"2": 70.0}},
                                  "wear_read": ["retired_pages"]}, None)}
    [[found]] = rs.of_ledger(ledger, NOW + DAY, nodes={"n2"}, current=current)
    assert found.reached and found.value == 70
    # a node the ledger kept no run of (a run's first): its own point alone, read whole
    fresh = {"n3": (NOW, {"wear": {"retired_pages": {"0": 70.0}},
                          "wear_read": ["retired_pages"]}, None),
             "n4": (NOW, {"wear": {}, "wear_read": ["retired_pages"]}, None)}
    [[first]] = rs.of_ledger(ledger, NOW, nodes={"n3", "n4"}, current=fresh)
    assert first.node == "n3" and first.reached


def test_node_runs_keeps_the_speed_beside_the_wear():
    cases = {"n1": [CaseResult("n1", "health", Outcome.PASSED, "", "")]}
    [run] = node_runs("r", cases, {}, NOW, {"n1": {"wear": {}, "wear_read": ["x"]}})
    assert isinstance(run, NodeRun) and run.figures == {"wear": {}, "wear_read": ["x"]}


def test_the_shipped_limits_cite_their_source():
    r = rs.rules()
    for name, limit in r.limits.items():
        assert limit.source, name
    assert r.limits["remapped_rows"].limit == 512
    assert r.limits["retired_pages"].limit == 64
    assert "rma-policy" in r.limits["remap_failed"].source
    with pytest.raises(ValueError, match="kind one of"):
        rs.rules_from({"counters": {"x": {"kind": "weekly", "what": "", "limit": 1,
                                          "source": ""}}, "horizon_days": 1})


def test_the_kept_runs_are_read_a_chunk_of_nodes_at_a_time_each_node_whole(new_ledger,
                                                                            monkeypatch):
    from burnin.ledger import runs as kept_runs
    monkeypatch.setattr(kept_runs, "KEPT_CHUNK", 2)
    ledger = new_ledger()
    names = [f"n{i}" for i in range(5)]
    for day in range(3):
        t = NOW - (2 - day) * DAY
        ledger.record_runs("c", [NodeRun(n, f"r{day}", t, "passed",
                                         figures={"wear": {"x": {"0": i + day}}})
                                 for i, n in enumerate(names)], 90, now=t)
    seen: list[tuple[str, list]] = []
    ledger.each_kept_since(NOW - 10 * DAY, lambda n, pts: seen.append((n, pts)))
    assert [n for n, _ in seen] == names
    for i, (_, pts) in enumerate(seen):
        assert [p[1]["wear"]["x"]["0"] for p in pts] == [i, i + 1, i + 2]
    assert set(ledger.kept_since(NOW - 10 * DAY, {"n1", "n4"})) == {"n1", "n4"}
    assert ledger.kept_since(NOW + DAY) == {}
