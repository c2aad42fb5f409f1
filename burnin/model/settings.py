"""An inventory section's settings, declared once: each field of its frozen dataclass says
its inventory kind (burnin/inventory/schema.py: KINDS) and its default, so that the
schema reads a section's keys from the dataclass and builds the record with the
dataclass's own defaults; no key or default is written twice."""

from __future__ import annotations

from dataclasses import MISSING, Field, field, fields, replace
from typing import Any


def setting(kind: str, default: Any = MISSING, *, factory: Any = MISSING,
            shown: bool = False) -> Any:
    """A section's setting: its inventory kind, its default (or a factory for a mutable
    or nested one), and whether `burnin inventory --json` shows it."""
    meta = {"kind": kind, "shown": shown}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def declared(cls: type) -> list[Field[Any]]:
    """The fields of `cls` that are inventory settings."""
    return [f for f in fields(cls) if "kind" in f.metadata]


def kinds_of(cls: type) -> dict[str, str]:
    """{key: kind} of a section's dataclass, in declaration order."""
    return {f.name: f.metadata["kind"] for f in declared(cls)}


def section(cls: type, values: dict[str, Any]) -> Any:
    """The record of `cls` from a section's checked values: the dataclass's defaults for
    what is absent; a YAML list becomes a tuple where the setting is one."""
    made = cls()
    given = {}
    for name, value in values.items():
        if isinstance(getattr(made, name), tuple) and isinstance(value, list):
            value = tuple(value)
        given[name] = value
    return replace(made, **given)
