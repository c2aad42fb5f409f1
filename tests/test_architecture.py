"""The shape of the code, asserted: burnin's import graph has no circle, probes never
import burnin, and the check table is the one place a check is declared."""

from __future__ import annotations

import ast
from pathlib import Path

from burnin.checks import CHECKS

REPO = Path(__file__).resolve().parent.parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every burnin module `path` imports, at any depth of the file (a function-level
    import closes a circle as surely as a top-level one)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("burnin")}
        elif isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("burnin") and node.level == 0:
            # `from burnin.checks import health` imports the submodule burnin.checks.health
            subs = {f"{node.module}.{a.name}" for a in node.names}
            found = {m for m in subs if (REPO / (m.replace(".", "/") + ".py")).exists()}
            out |= found or {node.module}
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in (REPO / "burnin").rglob("*.py")}
    return {name: {m for m in imports(p) if m in files} - {name} for name, p in files.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str]:
        state[n] = 1
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return []

    for n in sorted(g):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return []


def test_the_import_graph_has_no_circle():
    g = graph()
    assert "burnin.checks.base" in g and "burnin.run" in g
    assert find_cycle(g) == []


def test_the_cycle_finder_finds_a_planted_circle():
    g = graph()
    g["burnin.nodes"] = g["burnin.nodes"] | {"burnin.run"}  # nodes -> run -> ... -> nodes
    cycle = find_cycle(g)
    assert cycle and cycle[0] == cycle[-1] and "burnin.run" in cycle


def test_probes_import_nothing_of_burnin():
    for path in (REPO / "probes").glob("*.py"):
        assert not imports(path), f"{path.name} imports burnin"


def test_every_check_has_its_probe_suite_and_module_and_nothing_else_has_one():
    suites = {p.stem[len("test_"):] for p in (REPO / "suites").glob("test_*.py")}
    assert suites == set(CHECKS)
    for name, check in CHECKS.items():
        assert (REPO / "probes" / f"{check.probe_name}.py").exists(), name
        assert (REPO / "burnin" / "checks" / f"{name}.py").exists(), name


# A node's `storage:` (where the storage check writes) is an inventory key that DESIGN.md
# names after the check; the inventory and the probe payload carry it as a node's setting.
NODE_SETTING = {"storage"}
# node-check (burnin/nodecheck/) is the fast tier of the health, fabric and dcgm checks on
# the node between runs: it reads their settings, so that a node is judged by one
# definition of healthy, and names its own checks after what they read.
FAST_TIER = "nodecheck"


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}


def check_names_outside_the_checks(checks: dict) -> list[str]:
    """Where a module names a check outside the check's own places: burnin/checks/ and
    the page modules the Checks name (Check.page, Check.fleet_page)."""
    own = {ref.partition(":")[0] for c in checks.values() for ref in (c.page, c.fleet_page)
           if ref}
    names = set(checks) - NODE_SETTING
    offenders = []
    for path in (REPO / "burnin").rglob("*.py"):
        rel = path.relative_to(REPO)
        if rel.parts[1] in ("checks", FAST_TIER) or ".".join(rel.with_suffix("").parts) in own:
            continue
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstrings(tree)
        offenders += [f"{rel}:{n.lineno}: {n.value!r}" for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and n.value in names and id(n) not in docs]
    return offenders


def test_no_module_outside_a_checks_own_places_names_it():
    assert check_names_outside_the_checks(CHECKS) == []


def test_the_controller_never_sends_the_probes_test_hooks():
    """Faults planted in a probe's results and pauses between its phases reach a probe only
    through its payload's test_hooks, which tests write themselves: nothing of burnin (the
    controller) names them, and no check declares them as a setting an inventory could set."""
    hooks = {"test_hooks", "inject", "backing_dir", "alias_pages", "handshake_dir"}
    for path in (REPO / "burnin").rglob("*.py"):
        named = {n.value for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Constant) and n.value in hooks}
        assert not named, f"{path.relative_to(REPO)} names {sorted(named)}"
    for name, check in CHECKS.items():
        assert not hooks & set(check.settings), name


def test_a_transport_name_is_a_transport_or_a_launcher_never_both():
    """srun is a launcher (a check's nodes as one job step), not a transport whose run
    only raises: each inventory name is in exactly one table, of its own base class."""
    from burnin.inventory import TRANSPORT_NAMES
    from burnin.transports import LAUNCHERS, TRANSPORTS, Launcher, Transport, _load

    assert set(TRANSPORT_NAMES) == set(TRANSPORTS) | set(LAUNCHERS)
    assert not set(TRANSPORTS) & set(LAUNCHERS)
    assert all(issubclass(_load(t), Transport) for t in TRANSPORTS.values())
    assert all(issubclass(_load(t), Launcher) for t in LAUNCHERS.values())
