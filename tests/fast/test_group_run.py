"""The narrow interface a group check receives (burnin/checks/group_run.py: GroupRun): the
modules of the inter-node all-reduce reach nothing of the run but its fields, and what
the run puts in it is the run's own (its settings per node group, its one payload
builder), so that node-group overrides reach the inter-node groups."""

from __future__ import annotations

import ast
import json
from dataclasses import fields, replace
from pathlib import Path

from burnin.checks import CHECKS
from burnin.checks.allreduce_internode import internode
from burnin.checks.group_run import GroupRun
from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.probe.protocol import ProbeOutcome

REPO = Path(__file__).resolve().parents[2]
GROUP_MODULES = ("burnin/engine/groups.py", "burnin/checks/allreduce_internode.py",
                 "burnin/checks/train_internode.py")
UPPER = ("burnin.engine.run", "burnin.engine.launch", "burnin.engine.outcome_store",
         "burnin.plugin")


def reached(path: Path) -> set[str]:
    """Every attribute a function of `path` takes of a parameter annotated GroupRun."""
    out = set()
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, ast.FunctionDef):
            continue
        names = {a.arg for a in fn.args.args
                 if isinstance(a.annotation, ast.Name) and a.annotation.id == "GroupRun"}
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in names:
                out.add(node.attr)
    return out


def test_a_group_check_reaches_nothing_of_the_run_but_its_group_run():
    allowed = {f.name for f in fields(GroupRun)}
    for module in GROUP_MODULES:
        path = REPO / module
        used = reached(path)
        assert used, f"{module}: no GroupRun parameter found"
        assert used <= allowed, f"{module} reaches {sorted(used - allowed)}"
        tree = ast.parse(path.read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not imported & set(UPPER), f"{module} imports {imported & set(UPPER)}"
    # Every parameter named `run` there is a GroupRun: none hides the whole Run untyped.
    for module in GROUP_MODULES:
        for fn in ast.walk(ast.parse((REPO / module).read_text())):
            if isinstance(fn, ast.FunctionDef):
                for a in fn.args.args:
                    if a.arg == "run":
                        assert isinstance(a.annotation, ast.Name) and \
                            a.annotation.id == "GroupRun", f"{module}: {fn.name}"


def test_the_reach_finder_sees_a_planted_reach(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("def f(run: GroupRun):\n    return run.cancel.is_set()\n")
    assert reached(planted) == {"cancel"}


def group_of(tmp_path, nodes: list[dict], checks: dict | None = None):
    """The run's own GroupRun for the inter-node check over `nodes` (CPU nodes, two ranks
    each), its probe faked at the edge: every payload seen, and no group forms."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"version": 1, "checks": checks or {},
                               "defaults": {"transport": "local", "gpus": 0,
                                            "gpu_model": "H100-SXM5-80GB"},
                               "nodes": nodes}))
    inventory = load_inventory(inv)
    run = Run(inventory, list(inventory.nodes), "quick", tmp_path / "reports", "t")
    seen: dict[str, list[tuple[dict, float]]] = {}

    def probe(node, spec, payload, timeout_s, *args, **kwargs):
        seen.setdefault(node.name, []).append((payload, timeout_s))
        return ProbeOutcome(node.name, spec.probe_name, False, reason="no rendezvous here")

    group = replace(run.group_run(CHECKS["allreduce_internode"]), probe=probe,
                    launcher=lambda node: None, failed=dict, devices=lambda node: 2,
                    gpus=lambda node: 0)
    return group, seen


def test_node_group_overrides_reach_the_inter_node_groups(tmp_path):
    group, seen = group_of(tmp_path, [
        {"name": "n[1-2]"},
        {"name": "n3", "checks": {"allreduce_internode": {"timeout_s": 7}}}],
        checks={"allreduce_internode": {"timeout_s": 40}})
    internode(group)
    assert {t for _, t in seen["n3"]} == {7.0}
    assert {t for n in ("n1", "n2") for _, t in seen[n]} == {40.0}
    assert all(p["settings"]["timeout_s"] == t for runs in seen.values() for p, t in runs)


def test_a_groups_payload_is_the_one_every_probe_gets_plus_its_layout(tmp_path):
    group, seen = group_of(tmp_path, [{"name": "n[1-2]"}])
    internode(group)
    payload, _ = seen["n1"][0]
    assert payload["check"] == "allreduce" and payload["profile"] == "quick"
    assert payload["gpu_model"] == "H100-SXM5-80GB" and set(payload["storage"]) == {"path", "mount"}
    assert payload["group"]["world"] == 4 and payload["group"]["nodes"] == ["n1", "n2"]
