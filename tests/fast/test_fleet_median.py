"""The fleet charts' median line, taken from the devices already ranked."""

from __future__ import annotations

import random
import statistics

from burnin.report.summary.fleet import sorted_median


def test_the_median_of_ranked_values_is_statistics_median_either_way():
    rng = random.Random(3)
    for n in (1, 2, 3, 10, 11, 240, 241):
        values = [round(rng.gauss(700, 20), 3) for _ in range(n)] + [700.0] * (n % 3)
        for ranked in (sorted(values), sorted(values, reverse=True)):
            assert sorted_median(ranked) == statistics.median(values), (n, ranked[:4])
