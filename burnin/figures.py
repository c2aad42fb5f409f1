"""The key figures of a probe record (a results.jsonl line), in one place: metrics.prom,
summary.html and `burnin compare` all read them from here, and each check declares its
own (Check.figures)."""

from __future__ import annotations

import json
from pathlib import Path

from burnin.checks import CHECKS, Figure, Measure

__all__ = ["Figure", "Measure", "key_figures", "measure", "read_records"]


def measure(metric: str) -> Measure | None:
    """What the checks declare a figure of this metric name to be (Check.measures), or
    None: a figure no check describes reads as its metric name and labels."""
    for check in CHECKS.values():
        for m in check.measures:
            if m.metric == metric:
                return m
    return None


def read_records(path: Path) -> list[dict]:
    """results.jsonl, skipping a torn last line (a run killed mid-write)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def key_figures(record: dict) -> list[Figure]:
    """The record's figures; none when the probe failed or the check is unknown. A record
    that does not have the shape its check declares yields none either (an old or
    doctored results.jsonl must not break a report)."""
    spec = CHECKS.get(record.get("check", ""))
    if not record.get("ok") or spec is None or spec.figures is None:
        return []
    try:
        return [f for f in spec.figures(record) if isinstance(f.value, (int, float))]
    except (KeyError, TypeError, AttributeError, IndexError):
        return []
