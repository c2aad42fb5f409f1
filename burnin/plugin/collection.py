"""Which pytest items are burnin checks, of which check and node, and which of them
apply: the plugin's collection, as plain functions over items."""

from __future__ import annotations

from typing import cast

import pytest

from burnin.checks import CHECKS
from burnin.engine.run import Run
from burnin.model.nodes import Node


def check_of(item: pytest.Item) -> str:
    """The check a test judges: its function's name without 'test_' (test_health: health)."""
    name = getattr(item, "originalname", item.name)
    return name[5:] if name.startswith("test_") else name


def check_of_id(nodeid: str) -> str:
    """check_of() from a test id, 'suites/test_sdc.py::test_sdc[n1]' -> 'sdc'."""
    name = nodeid.rpartition("::")[2].partition("[")[0]
    return name[5:] if name.startswith("test_") else name


def node_param(item: pytest.Item):
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("node") if callspec is not None else None


def node_of(item: pytest.Item) -> Node:
    """The node a check's item runs on (is_check(item)): its `node` parameter."""
    # A pytest.Function by construction: only a test function's item takes the `node`
    # fixture, which pytest_generate_tests parametrises with Nodes (pytest's types say
    # neither).
    return cast(Node, cast(pytest.Function, item).callspec.params["node"])


def is_check(item: pytest.Item) -> bool:
    return "node" in getattr(item, "fixturenames", ()) and check_of(item) in CHECKS


def inapplicable(run: Run, items: list[pytest.Item]) -> list[pytest.Item]:
    """The items whose check does not apply to their node (pcie on a CPU-only node, the
    inter-node all-reduce of a lone node). A `gpus: auto` node's count is learned from its
    health facts (Run.gpus: the health probe runs now if it has not, once for the run,
    shared with xdist workers through the run directory), and only when a GPU-only check
    of that node is among the items: otherwise nothing is run for collection."""
    checks = [(i, CHECKS[check_of(i)], node_of(i)) for i in items if is_check(i)]
    learn = {n.name for _, c, n in checks if c.gpu_only and n.gpus is None}
    gpus = {n.name: run.gpus(n) if n.name in learn else n.gpus for _, _, n in checks}
    # A check needing a tool (dcgm) applies where the node's health facts found it.
    look = {n.name for _, c, n in checks if c.tool is not None and gpus[n.name] != 0}
    equipped = {n.name: run.equipped(n) if n.name in look else None for _, _, n in checks}
    return [i for i, c, n in checks
            if not c.applies(gpus[n.name], len(run.nodes), equipped[n.name])]
