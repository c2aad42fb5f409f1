"""The inventory's `rolling:` section, checked (burnin/inventory/schema.py calls `rolling`
with its checker): the capacity budget and pace of `burnin run --rolling`. Every error
names the line and key, as the rest of the schema's."""

from __future__ import annotations

from typing import Any

from burnin.checks import Kind
from burnin.model.rolling import RollingSettings, duration_s


def _count_or_fraction(v: object, low: int) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return v >= low
    return isinstance(v, float) and 0 < v < 1


KEYS: dict[str, Any] = {
    "max_out": Kind(lambda v: _count_or_fraction(v, 1),
                    "a count of nodes (an integer >= 1) or a fraction of them (above 0, "
                    "below 1)"),
    "min_available": Kind(lambda v: _count_or_fraction(v, 0),
                          "a count of nodes (an integer >= 0) or a fraction of a group "
                          "(above 0, below 1)"),
    "group_by": "str_list",
    "drain_timeout_s": "positive",
    "every": Kind(lambda v: duration_s(v) is not None,
                  'a duration such as "7d", "12h", "90m" (s, m, h, d, w) or seconds'),
    "poll_s": "positive",
    "retries": "release_after",
}


def rolling(c, doc, top: dict) -> RollingSettings:
    """`rolling:` of the inventory `doc` (its checked top-level `top`), with `c`'s errors
    added for what is wrong."""
    if "rolling" not in top or not c.mapping(top["rolling"], "rolling",
                                               doc.key_lines["rolling"]):
        return RollingSettings()
    values = c.keys(top["rolling"], KEYS, "rolling")
    if "group_by" in values:
        values["group_by"] = tuple(values["group_by"])
    if "every" in values:
        values["every"] = duration_s(values["every"])
    return RollingSettings(**values)
