"""Evidence bundle per failed node: reports/<run-id>/nodes/<node>/, one folder a ticket
to a hardware vendor can attach: the verdicts, every raw probe output, the telemetry
series, and the node's facts (driver, versions, devices)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from burnin.checks import CHECKS
from burnin.model.outcome import Outcome


def write_bundle(run_dir: Path, node: str, verdicts: dict[str, tuple[str, str]],
                 records: list[dict]) -> Path:
    folder = open_bundle(run_dir, node, verdicts)
    for r in records:
        add_record(folder, r)
    return folder


def open_bundle(run_dir: Path, node: str, verdicts: dict[str, tuple[str, str]]) -> Path:
    """The node's folder with its verdicts.txt; its records are added one at a time
    (add_record), so that a fleet's bundles are written as results.jsonl is read, no
    node's whole documents held for the others'."""
    folder = (run_dir / "nodes" / node).resolve()
    if folder.parent != (run_dir / "nodes").resolve():  # '../x', 'a/b': never a path
        raise ValueError(f"node name {node!r} is not a file name")
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"{check}: {Outcome(outcome).junit or Outcome(outcome).word}" +
             (f": {message}" if message else "")
             for check, (outcome, message) in sorted(verdicts.items())]
    (folder / "verdicts.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def add_record(folder: Path, r: dict) -> None:
    """One probe record into its node's folder: its raw document, and what its check
    draws out of it for a vendor (Check.evidence)."""
    spec = CHECKS.get(r.get("check", ""))
    if spec is None:
        return  # its name would become a file name: only checks burnin knows
    (folder / f"{spec.name}.json").write_text(readable(r), encoding="utf-8")
    if not r.get("ok") or spec.evidence is None:
        return
    try:
        extra = spec.evidence(r)
    except (KeyError, TypeError, AttributeError):
        return  # a record of an unexpected shape: its raw .json is there already
    for name, content in extra.items():
        (folder / name).write_text(readable(content), encoding="utf-8")


def readable(value, depth: int = 0) -> str:
    """JSON as a person reads it: an object's keys and a list's objects one a line, a list
    of numbers (a telemetry series, thousands of samples) on one line. json.dumps(indent=)
    would write one sample a line, in pure Python: seconds per failing node of a fleet."""
    pad = "\n" + " " * (depth + 1)
    if isinstance(value, dict) and value:
        get, deeper = _SCALAR.get, depth + 1  # most values are plain scalars: no readable()
        return "{" + ",".join(f"{pad}{_key(k)}: "
                              f"{w(v) if (w := get(type(v))) else readable(v, deeper)}"
                              for k, v in value.items()) + "\n" + " " * depth + "}"
    if isinstance(value, list) and value and isinstance(value[0], dict):  # devices, ports
        return "[" + ",".join(pad + readable(v, depth + 1) for v in value) + "\n" + \
            " " * depth + "]"
    return _dumps(value)


# json.dumps' own encoder, without its call's argument checks: 300 failing nodes of a
# fleet are a quarter of a million values.
_dumps = json.JSONEncoder().encode
# What json.dumps writes for the plain scalars, made by the same functions it uses;
# a float that is not finite (NaN, Infinity) and any subclass go through _dumps.
_SCALAR = {str: json.encoder.encode_basestring_ascii, int: int.__repr__,
           bool: lambda v: "true" if v else "false", type(None): lambda v: "null",
           float: lambda v: float.__repr__(v) if v - v == 0.0 else _dumps(v)}


def _key(k) -> str:
    try:
        return _keys(k)
    except TypeError:  # a key that cannot be hashed: not JSON's, but written all the same
        return _dumps(str(k))


@functools.lru_cache(maxsize=4096, typed=True)  # True is not 1 here
def _keys(k) -> str:
    return _dumps(str(k))
