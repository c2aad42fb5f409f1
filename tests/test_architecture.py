"""The shape of the code, asserted: burnin's packages are layers and a lower one never
imports a higher one (so the import graph has no circle), probes never import burnin,
and the check table is the one place a check is declared."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from burnin.checks import CHECKS

REPO = Path(__file__).resolve().parent.parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """A burnin module or package of this checkout (`burnin.report` is one: its folder)."""
    where = REPO / name.replace(".", "/")
    return where.with_suffix(".py").exists() or (where / "__init__.py").exists()


def _absolute(path: Path, module: str | None, level: int) -> str | None:
    """The absolute name of a `from ... import` of `path`: `from ..report import junit` in
    burnin/gate/x.py is burnin.report."""
    if level == 0:
        return module
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[:len(package) - (level - 1)] if level > 1 else package
    return ".".join(base + ([module] if module else []))


# A "module:attr" string: a reference another part imports by name when it needs it
# (Check.page, the transports' TABLE, the ledger's BACKENDS), an import all the same.
MODULE_ATTR = re.compile(r"^(burnin(?:\.\w+)+):\w+(?:\.\w+)*$")
DYNAMIC = {"import_module", "__import__"}


def imports(path: Path, source: str | None = None, lazy: bool = True) -> set[str]:
    """Every burnin module `path` imports, at any depth of the file (a function-level
    import closes a circle as surely as a top-level one): `import burnin.x`, `from burnin
    import x` (x a module or a package), relative imports, importlib.import_module and
    __import__ of a literal name, and (with `lazy`) "burnin.x:attr" strings."""
    out: set[str] = set()
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("burnin")}
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(path, node.module, node.level)
            if not module or not (module == "burnin" or module.startswith("burnin.")):
                continue
            # `from burnin.checks import health` imports the submodule burnin.checks.health
            subs = {f"{module}.{a.name}" for a in node.names}
            found = {m for m in subs if _is_module(m)}
            out |= found or {module}
        elif isinstance(node, ast.Call) and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else \
                func.id if isinstance(func, ast.Name) else ""
            if name in DYNAMIC and node.args[0].value.startswith("burnin"):
                out.add(node.args[0].value)
        elif lazy and isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                (m := MODULE_ATTR.match(node.value)):
            out.add(m.group(1))
    return out


def graph(lazy: bool = True) -> dict[str, set[str]]:
    """{module: the burnin modules it imports}; with `lazy`, also those it names in a
    "module:attr" string, imported when used: a dependency all the same, though it closes
    no circle at import time (the transports' TABLE names its rows, whose modules import
    the package's base classes)."""
    files = {module_name(p): p for p in (REPO / "burnin").rglob("*.py")}
    return {name: {m for m in imports(p, lazy=lazy) if m in files} - {name}
            for name, p in files.items()}


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


# burnin's layers, lowest first (README "The house"; each package's __init__ docstring says
# its layer and what it may import). A module may import its own package and any package
# of a lower layer; never a higher layer's, nor another package of its own layer.
LAYERS = (
    ("burnin", "burnin.errors"),
    ("burnin.core",),
    ("burnin.model",),
    ("burnin.transports", "burnin.ledger"),
    ("burnin.probe",),
    ("burnin.checks",),
    ("burnin.figures",),
    ("burnin.inventory",),
    ("burnin.engine",),
    ("burnin.gate",),
    ("burnin.report", "burnin.nodecheck"),
    ("burnin.extensions",),  # fills the tables of layers 3, 5 and 10 from entry points
    ("burnin.plugin", "burnin.api", "burnin.testing"),  # api, testing: for outside authors
    ("burnin.cli",),
    ("burnin.__main__",),  # python -m burnin
)


def package_of(module: str) -> tuple[int, str]:
    """(layer, package) of a burnin module: the longest package of LAYERS it is in."""
    best = None
    for rank, packages in enumerate(LAYERS):
        for p in packages:
            if (module == p or module.startswith(p + ".")) and \
                    (best is None or len(p) > len(best[1])):
                best = (rank, p)
    assert best is not None, f"{module} is in no layer of LAYERS"
    return best


# Dependencies up the layers that stay until their code moves, each named and explained.
# Only a "module:attr" string may use one (test_no_module_imports_a_higher_layer...: the
# graph without those strings has no exception at all).
ALLOWED = {
    # Check pages: a Check names the function that draws its part of a node's section
    # and of the fleet (Check.page, Check.fleet_page). That code is HTML built with the
    # report layer's helpers, so it lives there and the report layer imports it when it
    # renders; the checks layer never imports it. The fix is a move between layers (each
    # page part beside its check, over an HTML toolkit below the checks).
    ("burnin.checks", "burnin.report.summary.checks"): "check pages",
    ("burnin.checks", "burnin.report.summary.fleet_checks"): "check pages",
    ("burnin.checks", "burnin.report.summary.burn_part"): "check pages",
    ("burnin.checks", "burnin.report.summary.train_part"): "check pages",
    ("burnin.checks", "burnin.report.summary.collectives_part"): "check pages",
}


def wrong_way(g: dict[str, set[str]], allowed: dict | None = None) -> list[str]:
    """Every import that goes up the layers or sideways into a peer package, but those
    `allowed` ({(importing package, imported module): why})."""
    out = []
    for module, deps in sorted(g.items()):
        rank, package = package_of(module)
        for dep in sorted(deps):
            dep_rank, dep_package = package_of(dep)
            if (package, dep) in (allowed or {}):
                continue
            if dep_package != package and dep_rank >= rank:
                out.append(f"{module} (layer {rank}) imports {dep} (layer {dep_rank})")
    return out


def test_no_module_imports_a_higher_layer_or_a_peer_package():
    g = graph()
    assert len(g) > 80 and "burnin.engine.run" in g  # the graph is burnin's, whole
    assert wrong_way(graph(lazy=False)) == []
    assert wrong_way(g, ALLOWED) == []
    # each exception is still needed: one that no longer is goes from ALLOWED
    used = {(package_of(m)[1], d) for m, deps in g.items() for d in deps}
    assert set(ALLOWED) <= used, set(ALLOWED) - used


# Each way of importing, planted in a gate module (layer 9) and naming the report layer
# (10): each must be an import up the layers.
PLANTED = {
    "from burnin import report": "burnin.report",
    "from burnin import report as r": "burnin.report",
    "from ..report import junit": "burnin.report.junit",
    "from .. import report": "burnin.report",
    "from ..report.junit import write": "burnin.report.junit",
    "import importlib\nj = importlib.import_module('burnin.report.junit')": "burnin.report.junit",
    "from importlib import import_module\nj = import_module('burnin.report')": "burnin.report",
    "j = __import__('burnin.report.junit')": "burnin.report.junit",
    "PAGE = 'burnin.report.summary.checks:storage'": "burnin.report.summary.checks",
    "TABLE = {'x': Row('burnin.report.publish:Writer')}": "burnin.report.publish",
}


@pytest.mark.parametrize("source", PLANTED)
def test_the_layer_check_finds_each_way_of_importing_planted(source):
    planted = REPO / "burnin" / "gate" / "planted.py"
    g = graph()
    g["burnin.gate.planted"] = {m for m in imports(planted, source) if m in g}
    assert PLANTED[source] in g["burnin.gate.planted"]
    assert wrong_way(g, ALLOWED) == [
        f"burnin.gate.planted (layer 9) imports {PLANTED[source]} (layer 10)"]


def test_an_allowed_page_string_is_no_licence_for_an_import():
    """ALLOWED covers a check page's "module:attr" string only: the same module imported
    from a check, or another report module named by a string, is still caught."""
    check = REPO / "burnin" / "checks" / "planted.py"
    g = graph()
    g["burnin.checks.planted"] = imports(check, "from burnin.report.summary import checks")
    assert wrong_way(graph(lazy=False) | {"burnin.checks.planted": g["burnin.checks.planted"]})
    g["burnin.checks.planted"] = imports(check, "W = 'burnin.report.publish:publish'")
    assert wrong_way(g, ALLOWED) == [
        "burnin.checks.planted (layer 5) imports burnin.report.publish (layer 10)"]


def test_the_layer_check_finds_a_planted_wrong_way_import():
    g = graph()
    g["burnin.gate.quarantine"] = g["burnin.gate.quarantine"] | {"burnin.report.junit"}
    g["burnin.transports.slurm"] = g["burnin.transports.slurm"] | {"burnin.ledger.api"}
    assert wrong_way(g, ALLOWED) == [
        "burnin.gate.quarantine (layer 9) imports burnin.report.junit (layer 10)",
        "burnin.transports.slurm (layer 3) imports burnin.ledger.api (layer 3)"]


def test_every_package_says_its_layer():
    """Each package's docstring states the layer the table gives it, so that a reader of
    the package learns what it may import without opening this test."""
    for rank, packages in enumerate(LAYERS):
        for p in packages:
            path = REPO / (p.replace(".", "/") + "/__init__.py")
            if p == "burnin" or not path.exists():
                continue
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert f"Layer {rank}" in doc, f"{path.relative_to(REPO)}: says no 'Layer {rank}'"
    packages = {p.parent for p in (REPO / "burnin").glob("*/__init__.py")}
    named = {REPO / p.replace(".", "/") for layer in LAYERS for p in layer}
    assert packages <= named, f"packages in no layer: {sorted(map(str, packages - named))}"


def test_the_import_graph_has_no_circle():
    g = graph(lazy=False)
    assert "burnin.checks.base" in g and "burnin.engine.run" in g
    assert find_cycle(g) == []


def test_the_cycle_finder_finds_a_planted_circle():
    g = graph()
    # nodes -> run -> ... -> nodes
    g["burnin.model.nodes"] = g["burnin.model.nodes"] | {"burnin.engine.run"}
    cycle = find_cycle(g)
    assert cycle and cycle[0] == cycle[-1] and "burnin.engine.run" in cycle


def test_probes_import_nothing_of_burnin():
    for path in (REPO / "probes").glob("*.py"):
        assert not imports(path), f"{path.name} imports burnin"


def test_every_check_has_its_probe_suite_and_module_and_nothing_else_has_one():
    # suites/test_installed.py holds the tests of the checks installed distributions bring
    suites = {p.stem[len("test_"):] for p in (REPO / "suites").glob("test_*.py")} - {"installed"}
    assert suites == set(CHECKS)
    for name, check in CHECKS.items():
        assert (REPO / "probes" / f"{check.probe_name}.py").exists(), name
        assert (REPO / "burnin" / "checks" / f"{name}.py").exists(), name


# A node's `storage:` (where the storage check writes) is an inventory key named after the
# check (docs/reference/inventory.md); the inventory and the probe payload carry it as a
# node's setting.
NODE_SETTING = {"storage"}
# node-check (burnin/nodecheck/) is the fast tier of the health, fabric and dcgm checks on
# the node between runs: it reads their settings, so that a node is judged by one
# definition of healthy, and names its own checks after what they read.
FAST_TIER = "nodecheck"
# ... whose own checks' names the inventory needs from below it.
NODE_CHECK_NAMES = Path("burnin/model/node_check.py")


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
        if rel.parts[1] in ("checks", FAST_TIER) or rel == NODE_CHECK_NAMES or \
                ".".join(rel.with_suffix("").parts) in own:
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
    from burnin.inventory.schema import transport_names
    from burnin.transports import LAUNCHERS, TABLE, TRANSPORTS, Launcher, Transport, _load

    assert set(transport_names()) == set(TRANSPORTS) | set(LAUNCHERS) == set(TABLE)
    assert not set(TRANSPORTS) & set(LAUNCHERS)
    assert all(issubclass(_load(t), Transport) for t in TRANSPORTS.values())
    assert all(issubclass(_load(t), Launcher) for t in LAUNCHERS.values())


# Exceptions that never reach a user as such: each becomes a node's reason (its testcase's
# message), and a node's fault is no error of burnin's.
NODE_SIDE = {"NodeUnreachable", "NodeBusy", "UnsafeDocument"}


def test_the_errors_a_user_sees_are_in_one_module():
    """burnin/errors.py holds every exception class but the node-side ones, each of them a
    BurninError; the modules that raise them import them from there."""
    import burnin.errors as errors

    elsewhere = {}
    for path in (REPO / "burnin").rglob("*.py"):
        if path.name == "errors.py" and path.parent.name == "burnin":
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception"))
                                                 or b.id in NODE_SIDE) for b in n.bases):
                elsewhere[n.name] = str(path.relative_to(REPO))
    assert set(elsewhere) == NODE_SIDE, elsewhere
    ours = [v for v in vars(errors).values()
            if isinstance(v, type) and issubclass(v, Exception) and v.__module__ == errors.__name__]
    assert len(ours) >= 12 and all(issubclass(e, errors.BurninError) for e in ours)
