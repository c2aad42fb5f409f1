"""Inventory schema version 1: a YAML file in, a validated, expanded list of Nodes out.

Validation is strict and happens before any node is touched: every error names the
file, the line, the key and what was expected. docs/reference/inventory.md documents
every key.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from ClusterShell.NodeSet import NodeSet, NodeSetException

from burnin.checks import CHECKS, Kind
from burnin.errors import InventoryError  # noqa: F401  (raised here, caught by callers)
from burnin.inventory import yamlsource
from burnin.inventory.gpu_models import gpu_models as _gpu_models
from burnin.inventory.gpu_models import known_model as _known_model
from burnin.inventory.quarantine import quarantine as _quarantine
from burnin.inventory.remediation import remediation as _remediation
from burnin.inventory.rolling import rolling as _rolling
from burnin.inventory.yamlsource import Mapping, Sequence, SourceError, SourceErrors
from burnin.ledger.backends import LedgerUrlError, parse_location
from burnin.model import environment
from burnin.model.node_check import NODE_CHECK_KEYS, NODE_CHECKS
from burnin.model.nodes import (
    GoodputSettings,
    Inventory,
    Node,
    NodeCheckSettings,
    StorageSettings,
)
from burnin.model.settings import kinds_of, section
from burnin.transports import TABLE

QUARANTINE_ACTIONS = ("slurm", "command")
SUPPORTED_VERSIONS = (1,)


# --- schema, as data -------------------------------------------------------------------

def _is_str(v):
    return isinstance(v, str) and v != ""


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


KINDS = {
    "str": (_is_str, "a non-empty string"),
    "int": (_is_int, "an integer"),
    "port": (lambda v: _is_int(v) and 0 < v < 65536, "a port number, 1 to 65535"),
    "number": (_is_number, "a number"),
    "positive": (lambda v: _is_number(v) and v > 0, "a number above 0"),
    "nonnegative": (lambda v: _is_number(v) and v >= 0, "a number, 0 or above"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "gpus": (lambda v: v == "auto" or (_is_int(v) and v >= 0), "an integer >= 0, or auto"),
    "gpu_model": (lambda v: _is_str(v), "a model name"),  # checked against the models below
    "device_count": (lambda v: _is_int(v) and 1 <= v <= 64, "an integer from 1 to 64"),
    "job_nodes": (lambda v: _is_int(v) and v >= 1, "an integer >= 1 (nodes in a job)"),
    "hca_count": (lambda v: _is_int(v) and 0 <= v <= 256, "an integer from 0 to 256"),
    "str_list": (lambda v: isinstance(v, list) and all(_is_str(x) for x in v),
                 "a list of strings"),
    "labels": (lambda v: isinstance(v, dict)
               and all(isinstance(k, str) and isinstance(x, (str, int, float))
                       for k, x in v.items()),
               "a mapping of label names to plain values"),
    "actions": (lambda v: isinstance(v, list) and all(x in QUARANTINE_ACTIONS for x in v),
                "a list of: " + ", ".join(QUARANTINE_ACTIONS)),
    "release_after": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "fraction": (lambda v: _is_number(v) and 0 <= v <= 1, "a number from 0 to 1"),
    # slurmd kills a HealthCheckProgram after 60 s: the budget stays below, with room.
    "budget": (lambda v: _is_number(v) and 0 < v <= 50,
               "a number of seconds above 0, at most 50 (slurmd kills a health check at 60)"),
    "dcgm_mode": (lambda v: v in ("auto", "off"), "auto or off"),
    "abspath": (lambda v: _is_str(v) and v.startswith("/") and "\0" not in v,
                "an absolute path"),
    "node_check_list": (lambda v: isinstance(v, list)
                        and all(isinstance(x, str) and x in NODE_CHECKS for x in v),
                        "a list of: " + ", ".join(NODE_CHECKS)),
    "check_list": (lambda v: isinstance(v, list) and v
                   and all(isinstance(x, str) and x in CHECKS for x in v),
                   "a non-empty list of: " + ", ".join(CHECKS)),
}

STORAGE_KEYS = kinds_of(StorageSettings)
EXPECT_KEYS = {"driver": "str", "vbios": "str", "cuda": "str"}


# A transport's own settings are its row's (burnin/transports/__init__.py: TABLE): the
# keys, their kinds and defaults are read from there each time an inventory is loaded, so
# that a new transport is known here without a line of this file.
def transport_names() -> tuple[str, ...]:
    return tuple(TABLE)


def transport_keys() -> dict[str, dict[str, str]]:
    """{transport: {key: kind}} for every transport that has settings."""
    return {name: {f.name: f.metadata["kind"] for f in fields(row.settings)}
            for name, row in TABLE.items() if row.settings is not None}


def nested_keys() -> dict[str, dict[str, str]]:
    """The sections under defaults or a node whose keys are checked one by one."""
    return {**transport_keys(), "storage": STORAGE_KEYS, "expect": EXPECT_KEYS}


def default_keys() -> dict[str, str]:
    return {"transport": "transport", "python": "str", "workdir": "str", "gpus": "gpus",
            "gpu_model": "gpu_model", "cpu_devices": "device_count",
            "hcas": "hca_count", "nvlink_domain": "str", "imex_channels": "bool",
            "env": "env", **{k: k for k in nested_keys()}}


def node_keys() -> dict[str, str]:
    return {"name": "str", "address": "str", "labels": "labels", "checks": "mapping",
            **default_keys()}


# Each section's keys, kinds and defaults are its dataclass's (burnin/model/nodes.py).
ADMISSION_KEYS = {"require": "check_list"}
GOODPUT_KEYS = kinds_of(GoodputSettings)
TOP_KEYS = {"version": "int", "cluster": "str", "defaults": "mapping", "nodes": "list",
            "checks": "mapping", "quarantine": "mapping", "admission": "mapping",
            "gpu_models": "mapping", "goodput": "mapping", "node_check": "mapping",
            "remediation": "mapping", "rolling": "mapping"}
# A node's name becomes a file name in reports and a Slurm argument: hostname characters.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class _Checker:
    """Walks a located YAML tree against the schema, collecting every error."""

    def __init__(self, shown: str):
        self.shown = shown
        self.errors: list[SourceError] = []

    def error(self, line, key, message):
        self.errors.append(SourceError(self.shown, line, key, message))

    def mapping(self, value, where: str, line) -> bool:
        if isinstance(value, Mapping):
            return True
        self.error(line, where, f"expected a mapping, got {_describe(value)}")
        return False

    def keys(self, m: Mapping, schema: dict, where: str) -> dict:
        """Check m's keys and plain values against schema; return the valid entries."""
        good: dict[str, Any] = {}
        nested = nested_keys()
        for key, value in m.items():
            line = m.key_lines[key]
            path = f"{where}.{key}" if where else str(key)
            kind = schema.get(key)
            if kind is None:
                self.error(line, path, "unknown key; expected one of: " + ", ".join(schema))
            elif kind in nested:
                if self.mapping(value, path, line):
                    good[key] = self.keys(value, nested[kind], path)
            elif kind in ("mapping", "list"):
                good[key] = value
            elif kind == "ledger":  # its own message, which never repeats a password
                try:
                    if not isinstance(value, str):
                        raise LedgerUrlError(f"expected a path or a URL, got {_describe(value)}")
                    parse_location(value)
                    good[key] = value
                except LedgerUrlError as e:
                    self.error(line, path, str(e))
            elif kind == "env":
                if self.mapping(value, path, line):
                    good[key] = self.env(value, path)
            else:
                test, expected = (kind.test, kind.expected) if isinstance(kind, Kind) \
                    else _transport_kind() if kind == "transport" else KINDS[kind]
                if test(value):
                    good[key] = value
                else:
                    self.error(line, path, f"expected {expected}, got {_describe(value)}")
        return good

    def env(self, m: Mapping, where: str) -> dict[str, str]:
        """An `env:` map: each name and value checked, on the line of its own key."""
        if len(m) > environment.MAX_NAMES:
            self.error(m.line, where, f"{len(m)} variables, at most {environment.MAX_NAMES} "
                                      "expected")
        good: dict[str, Any] = {}
        for name, value in m.items():
            problem = environment.name_problem(name) or environment.value_problem(value)
            if problem:
                self.error(m.key_lines[name], f"{where}.{name}", problem)
            else:
                good[name] = value
        return good


def _transport_kind() -> tuple[Callable[[object], bool], str]:
    names = transport_names()
    return (lambda v: v in names), "one of: " + ", ".join(names)


def _describe(value) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, (Mapping, dict)):
        return "a mapping"
    if isinstance(value, (Sequence, list)):
        return "a list"
    return f"{type(value).__name__} {value!r}"


# --- loading ----------------------------------------------------------------------------

def load_inventory(path: str | Path) -> Inventory:
    """Read, validate and expand an inventory; raise InventoryError listing every problem."""
    path = Path(path)
    shown = str(path)
    try:
        doc = yamlsource.load(path, shown)
    except SourceErrors as e:
        raise InventoryError(e.errors) from None
    c = _Checker(shown)
    if not isinstance(doc, Mapping):
        c.error(getattr(doc, "line", 1), "", "expected a mapping with version, cluster, nodes")
        raise InventoryError(c.errors)

    top = c.keys(doc, TOP_KEYS, "")
    version = top.get("version")
    if "version" not in doc:
        c.error(doc.line, "version", "missing; expected version: 1")
    elif version is not None and version not in SUPPORTED_VERSIONS:
        c.error(doc.key_lines["version"], "version",
                f"unsupported version {version!r}; this burnin reads version 1")
        raise InventoryError(c.errors)  # the rest of a newer schema means nothing to us

    models = _gpu_models(c, doc, top)
    defaults = {}
    if "defaults" in top and c.mapping(top["defaults"], "defaults", doc.key_lines["defaults"]):
        defaults = c.keys(top["defaults"], default_keys(), "defaults")
        _known_model(c, top["defaults"], defaults, "defaults", models)

    nodes = _expand_nodes(c, doc, top, defaults, models)
    checks = _checks(c, top.get("checks"), doc.key_lines.get("checks"), "checks")
    quarantine = _quarantine(c, doc, top)
    require = None
    if "admission" in top and c.mapping(top["admission"], "admission",
                                        doc.key_lines["admission"]):
        require = c.keys(top["admission"], ADMISSION_KEYS, "admission").get("require")
    goodput = GoodputSettings()
    if "goodput" in top and c.mapping(top["goodput"], "goodput", doc.key_lines["goodput"]):
        goodput = section(GoodputSettings, c.keys(top["goodput"], GOODPUT_KEYS, "goodput"))
    node_check = NodeCheckSettings()
    if "node_check" in top and c.mapping(top["node_check"], "node_check",
                                         doc.key_lines["node_check"]):
        node_check = section(NodeCheckSettings,
                             c.keys(top["node_check"], NODE_CHECK_KEYS, "node_check"))
    remediation = _remediation(c, doc, top)
    rolling = _rolling(c, doc, top)
    if c.errors:
        raise InventoryError(c.errors)
    return Inventory(path=shown, cluster=top.get("cluster", path.stem), nodes=tuple(nodes),
                     checks=checks, quarantine=quarantine, gpu_models=models,
                     require=tuple(require) if require else None, goodput=goodput,
                     node_check=node_check, remediation=remediation,
                     rolling=rolling)


def _expand_nodes(c: _Checker, doc: Mapping, top: dict, defaults: dict,
                  models: dict) -> list[Node]:
    if "nodes" not in doc:
        c.error(doc.line, "nodes", "missing; expected a list of nodes")
        return []
    entries = top["nodes"]
    if not isinstance(entries, Sequence) or not entries:
        c.error(doc.key_lines["nodes"], "nodes", "expected a non-empty list of nodes")
        return []
    nodes: list[Node] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        where, line = f"nodes[{i}]", entries.item_lines[i]
        if not c.mapping(entry, where, line):
            continue
        values = c.keys(entry, node_keys(), where)
        _known_model(c, entry, values, where, models)
        if "checks" in values:
            values["checks"] = _checks(c, values["checks"], entry.key_lines["checks"],
                                       f"{where}.checks")
        if "name" not in entry:
            c.error(line, f"{where}.name", "missing; expected a hostname or hostlist")
            continue
        if "name" not in values:
            continue
        names = _hostlist(c, values["name"], entry.key_lines["name"], f"{where}.name")
        addresses = names
        if "address" in values:
            addresses = _hostlist(c, values["address"], entry.key_lines["address"],
                                  f"{where}.address")
            if names and addresses and len(addresses) != len(names):
                c.error(entry.key_lines["address"], f"{where}.address",
                        f"expands to {len(addresses)} addresses but name expands to "
                        f"{len(names)} nodes; expected one address per node")
                continue
        for name, address in zip(names, addresses, strict=True):
            if not NODE_NAME.fullmatch(name):
                c.error(entry.key_lines["name"], f"{where}.name",
                        f"{name!r} is not a valid node name; expected hostname characters "
                        "(letters, digits, '.', '_', '-'), starting with a letter or digit")
                continue
            if name in seen:
                c.error(entry.key_lines["name"], f"{where}.name",
                        f"node {name} is listed twice (first on line {seen[name]})")
                continue
            seen[name] = entry.key_lines["name"]
            nodes.append(_make_node(name, address, defaults, values))
    return nodes


def _hostlist(c: _Checker, text: str, line: int, where: str) -> list[str]:
    try:
        return list(NodeSet(text))
    except (NodeSetException, ValueError) as e:
        c.error(line, where, f"not a valid hostlist ({e}); expected e.g. gpu[001-032]")
        return []


def _make_node(name: str, address: str, defaults: dict, own: dict) -> Node:
    nested = nested_keys()
    merged = {**defaults, **{k: v for k, v in own.items() if k not in nested
                             and k not in ("name", "address")}}
    # A node's ssh: {port: 2222} changes the port and keeps the rest; its env: likewise,
    # name by name over the defaults'.
    for key in (*nested, "env"):
        merged[key] = {**defaults.get(key, {}), **own.get(key, {})}
    gpus = merged.get("gpus", "auto")
    # Every transport's record, the node's own transport's or not (as the defaults give
    # them), lists as tuples: the records are frozen.
    settings = {t: _record(TABLE[t].settings, merged.pop(t)) for t in transport_keys()}
    node = Node(
        name=name, address=address, transport_settings=settings,
        storage=StorageSettings(**merged.pop("storage")),
        labels={str(k): str(v) for k, v in merged.pop("labels", {}).items()},
    )
    merged["gpus"] = None if gpus == "auto" else gpus
    return replace(node, **merged)


def _record(record: type | None, values: dict[str, Any]) -> Any:
    """A transport's settings record from its section's checked values, lists as tuples."""
    assert record is not None  # transport_keys() names only transports with settings
    return record(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def _checks(c: _Checker, checks, line, where: str) -> dict[str, dict]:
    """Per-check settings under `checks:` (the inventory's, or a node group's)."""
    if checks is None or not c.mapping(checks, where, line):
        return {}
    out = {}
    for name, body in checks.items():
        key_line = checks.key_lines[name]
        spec = CHECKS.get(name)
        if spec is None:
            c.error(key_line, f"{where}.{name}",
                    "unknown check; expected one of: " + ", ".join(CHECKS))
            continue
        if not c.mapping(body, f"{where}.{name}", key_line):
            continue
        schema = {key: s.kind for key, s in spec.settings.items()}
        out[name] = c.keys(body, schema, f"{where}.{name}")
    return out


def select_nodes(inventory: Inventory, hostlist: str | None) -> list[Node]:
    """The inventory's nodes named by `hostlist` (all when None), in inventory order.

    Raises ValueError naming the unknown nodes or the bad hostlist.
    """
    if not hostlist:
        return list(inventory.nodes)
    try:
        wanted = set(NodeSet(hostlist))
    except (NodeSetException, ValueError) as e:
        raise ValueError(f"--nodes {hostlist!r} is not a valid hostlist: {e}") from None
    known = {n.name for n in inventory.nodes}
    unknown = wanted - known
    if unknown:
        raise ValueError(f"--nodes names nodes not in {inventory.path}: "
                         f"{NodeSet.fromlist(sorted(unknown))}")
    return [n for n in inventory.nodes if n.name in wanted]
