"""The rolling wave planner (burnin/gate/rolling.py) and the inventory's `rolling:`
section: max_out as a count and a fraction, min_available per partition and per label
group, nodes already out or unavailable counted, `every`."""

from __future__ import annotations

import pytest
import yaml

from burnin.gate.rolling import due, plan_wave
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.model.nodes import Node
from burnin.model.rolling import RollingSettings, amount, duration_s
from burnin.transports import TABLE


def fleet(parts: dict[str, int], racks: int = 0) -> dict[str, Node]:
    srun = TABLE["srun"].settings
    assert srun is not None
    out = {}
    for part, count in parts.items():
        for i in range(count):
            name = f"{part}{i:02d}"
            out[name] = Node(name, name, "srun",
                             transport_settings={"srun": srun(partition=part)},
                             labels={"rack": f"r{i % racks}"} if racks else {})
    return out


def test_max_out_counts_nodes_already_out_and_a_fraction_of_the_selected():
    nodes = fleet({"a": 10})
    names = list(nodes)
    assert plan_wave(names, [], [], nodes, 10, RollingSettings(max_out=3)).nodes == \
        ("a00", "a01", "a02")
    # a node a killed loop left drained fills one place of the budget
    assert plan_wave(names[1:], ["a00"], [], nodes, 10, RollingSettings(max_out=3)).nodes == \
        ("a01", "a02")
    assert len(plan_wave(names, [], [], nodes, 10, RollingSettings(max_out=0.25)).nodes) == 2
    assert plan_wave(names, [], [], nodes, 10, RollingSettings(max_out=1)).waiting == \
        tuple(names[1:])
    assert amount(0.01, 10) == 1 and amount(0.5, 0) == 0 and amount(4, 2) == 4


def test_min_available_holds_per_partition_counting_nodes_slurm_refuses():
    nodes = fleet({"a": 4, "b": 4})
    names = list(nodes)
    s = RollingSettings(max_out=8, min_available=3)
    assert plan_wave(names, [], [], nodes, 8, s).nodes == ("a00", "b00")
    # a00 drained by someone else: partition a has no node to spare
    wave = plan_wave(names[1:], [], ["a00"], nodes, 8, s)
    assert wave.nodes == ("b00",) and "a01" in wave.waiting
    # a fraction of each group's size
    assert plan_wave(names, [], [], nodes, 8,
                     RollingSettings(max_out=8, min_available=0.5)).nodes == \
        ("a00", "a01", "b00", "b01")


def test_min_available_holds_per_label_group():
    nodes = fleet({"a": 6}, racks=2)  # r0: a00 a02 a04; r1: a01 a03 a05
    s = RollingSettings(max_out=6, min_available=2, group_by=("rack",))
    assert plan_wave(list(nodes), [], [], nodes, 6, s).nodes == ("a00", "a01")
    s = RollingSettings(max_out=6, min_available=2, group_by=("partition", "rack"))
    assert plan_wave(list(nodes), [], [], nodes, 6, s).nodes == ("a00", "a01")


def test_every_leaves_recently_validated_nodes_out_and_takes_the_oldest_first():
    day = 86400.0
    validated = {"n1": 100 * day - 1 * day, "n2": 100 * day - 9 * day,
                 "n3": 100 * day - 8 * day}
    assert due(["n1", "n2", "n3", "n4"], validated, 100 * day, 7 * day) == ["n4", "n2", "n3"]
    assert due(["n1"], validated, 100 * day, 0) == ["n1"]
    assert duration_s("7d") == 7 * day and duration_s("90m") == 5400
    assert duration_s("2w") == 14 * day and duration_s(30) == 30
    assert duration_s("7 days") is None and duration_s(-1) is None and duration_s(True) is None


def write(tmp_path, rolling) -> str:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "cluster": "c", "rolling": rolling,
                                    "nodes": [{"name": "n1", "address": "n1"}]}))
    return str(path)


def test_the_inventory_reads_rolling_and_names_each_bad_key(tmp_path):
    inv = load_inventory(write(tmp_path, {"max_out": 0.1, "min_available": 2, "every": "12h",
                                          "group_by": ["rack"], "drain_timeout_s": 60}))
    assert inv.rolling == RollingSettings(max_out=0.1, min_available=2, every=43200.0,
                                          group_by=("rack",), drain_timeout_s=60)
    assert load_inventory(write(tmp_path, {})).rolling == RollingSettings()
    with pytest.raises(InventoryError) as e:
        load_inventory(write(tmp_path, {"max_out": 0, "min_available": 1.5, "every": "soon",
                                        "wave": 3}))
    text = str(e.value)
    for key in ("rolling.max_out", "rolling.min_available", "rolling.every",
                "rolling.wave: unknown key"):
        assert key in text, text


def test_ten_thousand_nodes_are_planned_in_one_pass():
    nodes = fleet({f"p{i}": 1000 for i in range(10)}, racks=50)
    s = RollingSettings(max_out=0.01, min_available=0.99, group_by=("partition", "rack"))
    wave = plan_wave(due(list(nodes), {}, 0.0, 1.0), [], [], nodes, len(nodes), s)
    assert len(wave.nodes) == 100 and len(wave.waiting) == 9900
