"""The inventory's `rolling:` section, checked (burnin/inventory/schema.py calls `rolling`
with its checker): the capacity budget and pace of `burnin run --rolling`. Every error
names the line and key, as the rest of the schema's."""

from __future__ import annotations

from typing import Any

from burnin.checks import Kind
from burnin.model.rolling import RollingHooks, RollingSettings, duration_s


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
    "hooks": "mapping",
}
HOOKS = ("busy", "out", "back")
HOOK_KEYS: dict[str, Any] = {
    **{name: "str_list" for name in HOOKS},
    "timeout_s": "positive",
    "output_bytes": Kind(lambda v: isinstance(v, int) and not isinstance(v, bool)
                         and 0 <= v <= 65536, "an integer from 0 to 65536"),
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
    if "hooks" in values:
        values["hooks"] = _hooks(c, values["hooks"])
        if values["hooks"] is None:
            del values["hooks"]
    return RollingSettings(**values)


def _hooks(c, section) -> RollingHooks | None:
    if not c.mapping(section, "rolling.hooks", getattr(section, "line", None)):
        return None
    values = c.keys(section, HOOK_KEYS, "rolling.hooks")
    missing = [h for h in HOOKS if h not in section]
    if missing:
        # a loop that could take a node out but not tell its work, or not bring it back,
        # would strand it or touch a node with jobs
        c.error(section.line, "rolling.hooks", f"missing {', '.join(missing)}; every one of "
                "busy, out and back is needed: [argv, ...] with {node}, {address}")
        return None
    if any(not values.get(h) for h in HOOKS):
        for h in HOOKS:
            if h in values and not values[h]:
                c.error(section.key_lines[h], f"rolling.hooks.{h}", "expected a command: "
                        "[argv, ...], got an empty list")
        return None
    for h in HOOKS:
        values[h] = tuple(values[h])
    return RollingHooks(**values)
