"""What a run learns from a node's health document before its other checks
(burnin/checks/health.py, facts_*): the GPUs the node must have under `gpus: auto`, the
tools it has (dcgmi), and the readings taken before the load. The run's engine alone
reads them (burnin/engine/run.py), so the slow tier reaches them only through suite runs;
here each is pinned at its edges."""

from __future__ import annotations

from support.judging import failed, outcome

from burnin.checks.health import facts_baseline, facts_equipped, facts_gpus


def health(devices=(), nvml="present", torch=None, **figures):
    figs = {"gpu": {"nvml": nvml}, **figures}
    if torch is not None:
        figs["torch"] = torch
    return outcome("health", [{"index": i} for i in devices], figs)


def test_gpus_are_nvmls_count_where_nvml_answers_whatever_torch_sees():
    assert facts_gpus(health([0, 1, 2], torch={"device_count": 1})) == 3
    assert facts_gpus(health([], torch={"device_count": 4})) == 0


def test_gpus_are_torchs_count_where_nvml_is_absent_and_none_where_torch_says_nothing():
    assert facts_gpus(health([0], nvml="absent", torch={"device_count": 2})) == 2
    assert facts_gpus(health([0], nvml="absent", torch={"device_count": None})) == 0
    assert facts_gpus(health([0], nvml="absent")) == 0
    no_gpu_section = outcome("health", [{"index": 0}], {"torch": {"device_count": 5}})
    assert facts_gpus(no_gpu_section) == 5


def test_nothing_is_assumed_from_a_failed_health_probe():
    down = failed("health", "no route to host")
    assert facts_gpus(down) is None
    assert facts_equipped(down) is None and facts_equipped(None) is None
    assert facts_baseline(down, "fabric") is None and facts_baseline(None, "fabric") is None


def test_equipped_are_the_checks_whose_tool_was_found_on_a_path():
    tools = {"dcgm": {"path": "/usr/bin/dcgmi"}, "nccl": {"path": None}, "ib": {}}
    assert facts_equipped(health(tools=tools)) == frozenset({"dcgm"})
    assert facts_equipped(health(tools={})) == frozenset()
    assert facts_equipped(health()) == frozenset()


def test_a_baseline_is_the_checks_own_reading_and_none_where_there_is_none():
    read = {"fabric": {"hca0": {"symbol_errors": 3}}}
    assert facts_baseline(health(baselines=read), "fabric") == {"hca0": {"symbol_errors": 3}}
    assert facts_baseline(health(baselines=read), "memory") is None
    assert facts_baseline(health(), "fabric") is None
    assert facts_baseline(health(baselines=None), "fabric") is None
