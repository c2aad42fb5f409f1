"""A node's trend folds its figures per family; the fold's plan is held per list of
figure keys (every node of a fleet has the same), so two nodes whose figures differ must
each get their own."""

from __future__ import annotations

from burnin.report.summary.trend import families


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


def test_a_sparkline_value_is_the_number_fmt_shows():
    import math
    import random

    from burnin.report.summary.charts import fmt
    from burnin.report.summary.trend import shown
    rng = random.Random(5)
    values = [0.0, -0.0, 1.0, 0.5, 9.995, 10.05, 99.95, 100.5, 101.5, 2.675, 0.0001234,
              123456.5, -3.14159, 1e-9, 1e17, math.inf, -math.inf]
    values += [rng.uniform(-1, 1) * 10 ** rng.randint(-4, 7) for _ in range(20_000)]
    values += [round(rng.uniform(0, 1000), rng.randint(0, 4)) for _ in range(20_000)]
    for v in values:
        want = float(fmt(v).replace("\u2009", ""))
        got = shown(v)
        assert got == want and math.copysign(1, got) == math.copysign(1, want), (v, got, want)
    assert math.isnan(shown(math.nan))
