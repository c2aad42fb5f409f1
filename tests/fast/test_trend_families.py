"""A node's trend folds its figures per family; the fold's plan is held per list of
figure keys (every node of a fleet has the same), so two nodes whose figures differ must
each get their own."""

from __future__ import annotations

from burnin.summary.trend import families


def tflops(device: str) -> tuple:
    return ("device_tflops", (("check", "burn"), ("device", device)))


def temp(device: str) -> tuple:
    return ("gpu_temperature_max_celsius", (("device", device),))


def test_each_family_is_its_worst_device_per_run_whatever_nodes_came_before():
    a = {tflops("cuda:0"): [700.0, 690.0], tflops("cuda:1"): [650.0, None],
         temp("cuda:0"): [60, 70], temp("cuda:1"): [65, None]}
    b = {temp("cuda:0"): [50, 51], tflops("cuda:0"): [None, 600.0]}  # other keys, order
    c = dict(reversed(list(a.items())))  # a's keys in another order: the same fold
    burn, hot = "burn TFLOPS, slowest device", "hottest GPU °C"
    for _ in range(2):  # the second time from the held plans
        assert families(a) == {burn: [650.0, 690.0], hot: [65, 70]}
        assert families(b) == {burn: [None, 600.0], hot: [50, 51]}
        assert families(c) == families(a)
