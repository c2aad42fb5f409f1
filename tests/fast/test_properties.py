"""Property tests where the input is hostile (Hypothesis; derandomized, so CI is
deterministic, and bounded to a few seconds each):

- any YAML given as an inventory ends in an Inventory or an InventoryError that says
  where, never another exception (a traceback where pytest's usage error belongs);
- any text given as a junit.xml ends in decisions or a ReportError, and a node is admitted
  only if every required check has exactly one passed testcase for it;
- any value given as a probe document gets a problem or none from the check's declared
  shape, never an exception, and a document it accepts has every declared field of its
  declared type.
"""

from __future__ import annotations

import copy
import math
import xml.etree.ElementTree as ET

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burnin.checks import CHECKS
from burnin.checks.burn import shape as burn_shape
from burnin.gate.admit import Report, ReportError, decide, read_junit
from burnin.inventory.schema import InventoryError, load_inventory
from burnin.model.nodes import Inventory
from burnin.probe.shapes import NONFINITE, Bool, List, Num, Obj, Scalar, Str

BOUNDED = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                   suppress_health_check=list(HealthCheck))

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["nan", "inf", "-inf", "", "\ud800", "\u202e", "a\nb", "x" * 5000]))
JSON = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=25)


# --- inventories ----------------------------------------------------------------------

BASE_INVENTORY = {
    "version": 1, "cluster": "rack42",
    "defaults": {"transport": "local", "gpus": 0, "python": "python3",
                 "ssh": {"user": "root", "port": 22}, "storage": {"path": "/tmp"}},
    "nodes": [{"name": "n[1-2]", "labels": {"rack": "r42"}},
              {"name": "g1", "address": "10.0.0.1", "gpus": 8, "gpu_model": "H100-SXM5-80GB",
               "checks": {"burn": {"min_tflops": 600}}}],
    "checks": {"burn": {"duration_s": 60, "peer_fraction": 0.9}, "sdc": {"dtype": "fp32"}},
    "quarantine": {"ledger": "/tmp/burnin-never-opened.db", "actions": ["command"],
                   "command": ["/bin/true", "{node}"], "release_after": 2},
    "admission": {"require": ["health", "sdc"]},
}
KEYS = st.one_of(st.sampled_from([
    "version", "cluster", "defaults", "nodes", "checks", "quarantine", "admission",
    "gpu_models", "name", "address", "transport", "python", "workdir", "gpus", "gpu_model",
    "ssh", "srun", "storage", "labels", "hcas", "expect", "cpu_devices", "burn", "sdc",
    "health", "require", "ledger", "actions", "command", "port", "timeout_s", "<<"]),
    st.text(max_size=6))
YAML_VALUES = st.recursive(
    st.one_of(JSON_SCALARS, st.sampled_from(["n[1-3]", "n[", "n[3-1]", "n[01-04],m[1-2]",
                                             "auto", "../x", "a b", "~", "ssh", "srun",
                                             "H100-SXM5-80GB", 0, -1, 2**63, 1e308])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12)


def _places(doc, at=()):
    yield at
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _places(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _places(v, (*at, i))


@st.composite
def inventories(draw):
    """A valid inventory with one to four hostile edits, as YAML text."""
    doc = copy.deepcopy(BASE_INVENTORY)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from([p for p in _places(doc) if p] or [()]))
        if not path:
            break
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        key = path[-1]
        what = draw(st.sampled_from(["replace", "delete", "add", "wrap"]))
        if what == "replace":
            parent[key] = draw(YAML_VALUES)
        elif what == "delete":
            del parent[key]
        elif what == "add" and isinstance(parent[key], dict):
            parent[key][draw(KEYS)] = draw(YAML_VALUES)
        elif what == "wrap":
            parent[key] = [parent[key]]
    return yaml.safe_dump(doc, allow_unicode=draw(st.booleans()))


RAW_YAML = st.one_of(
    st.text(max_size=200),
    st.sampled_from([
        "", "~", "[]", "version: 1", "version: 1\nnodes: [{name: n1}]\nnodes: []\n",
        "version: 1\nnodes: " + "[" * 5000 + "]" * 5000 + "\n",
        "version: 1\nnodes: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
        "version: 1\nnodes: !!python/object/apply:os.system ['false']\n",
        "version: 1\nnodes: [{name: n1}]\n? [a, b]\n: 1\n", "version: 1\n\t- x\n",
        "version: 1\nnodes:\n  - name: n1\n    gpus: .nan\n", "a: &a [1]\nb: *c\n",
        "%YAML 9.9\n---\nversion: 1\n", "--- 1\n--- 2\n", "version: 1\n<<: *nope\n",
    ]))


def _load(tmp_path, text: str):
    path = tmp_path / "inventory.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        inventory = load_inventory(path)
    except InventoryError as e:
        lines = str(e).splitlines()
        assert lines and all(line.startswith(str(path)) for line in lines), str(e)
        return None
    assert isinstance(inventory, Inventory) and inventory.nodes
    return inventory


def test_any_edited_inventory_is_an_inventory_or_an_inventory_error(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inv")

    @BOUNDED
    @given(inventories())
    def one(text):
        _load(tmp, text)
    one()


def test_any_yaml_text_is_an_inventory_or_an_inventory_error(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("raw")

    @BOUNDED
    @given(RAW_YAML)
    def one(text):
        _load(tmp, text)
    one()


def test_the_unedited_base_inventory_is_valid(tmp_path):
    assert len(_load(tmp_path, yaml.safe_dump(BASE_INVENTORY)).nodes) == 3


# --- junit.xml against admit ----------------------------------------------------------

NODES = st.sampled_from(["n1", "n2", "gpu017", "n\u00e9", "a b"])
# Mostly the checks a report requires, mostly passed: so that whether a node is admitted
# turns on a duplicate, a skip or a failure often, not once in a while.
CHECK_NAMES = st.sampled_from(["health", "sdc"] * 6 + sorted(CHECKS) + ["helth", "x", ""])
OUTCOMES = st.sampled_from(["passed"] * 4 + ["failure", "error", "skipped", "failure+skipped",
                                             "skipped+error"])
PROPERTY_VALUES = {
    "gpus": st.sampled_from(["0", "8", "unknown", "-1", ""]),
    "nodes_in_run": st.sampled_from(["1", "2", "0", "x", ""]),
    "equipped_checks": st.sampled_from(["unknown", "", "dcgm", "fabric,dcgm"]),
    "admission_require": st.sampled_from(["health,sdc", "health", "", "health,helth"]),
}
# Text XML can hold (a report burnin wrote holds no other: it made its text safe).
XML_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Cn", "Co")), max_size=10)
TRUSTED = {"burnin_report": "1", "run_id": "r1", "complete": "true"}
# One flaw at most per report, in one testsuite: each a reason to refuse the whole report.
FLAWS = {"none": {}, "not burnin's": {"burnin_report": None}, "no run id": {"run_id": None},
         "interrupted": {"complete": "false"}, "not complete": {"complete": None},
         "another run": {"run_id": "r2"}, "odd complete": {"complete": "TRUE"}}


@st.composite
def reports(draw):
    """A junit.xml as burnin writes it (or almost): (text, {node: [(check, outcome)]},
    [each testsuite's properties])."""
    root = ET.Element("testsuites")
    cases: dict[str, list[tuple[str, str]]] = {}
    suites: list[dict] = []
    count = draw(st.integers(0, 4))
    flaw = FLAWS[draw(st.sampled_from(sorted(FLAWS)))]
    everywhere = draw(st.booleans())  # the flaw in every testsuite, or in one
    flawed = draw(st.integers(0, max(count - 1, 0)))
    for i in range(count):
        node = draw(NODES)
        suite = ET.SubElement(root, "testsuite", name=node)
        props = ET.SubElement(suite, "properties")
        wanted = {**TRUSTED, **(flaw if everywhere or i == flawed else {})}
        for name, values in PROPERTY_VALUES.items():
            if draw(st.integers(0, 9)):  # mostly present
                wanted[name] = draw(values)
        suites.append({k: v for k, v in wanted.items() if v is not None})
        for name, value in suites[-1].items():
            ET.SubElement(props, "property", name=name, value=value)
        for _ in range(draw(st.sampled_from([0, 1, 2, 3, 4, 5]))):
            check, outcome = draw(CHECK_NAMES), draw(OUTCOMES)
            case = ET.SubElement(suite, "testcase", name=check)
            for tag in outcome.split("+"):
                if tag != "passed":
                    ET.SubElement(case, tag, message=draw(XML_TEXT))
            cases.setdefault(node, []).append((check, outcome))
    text = ET.tostring(root, encoding="unicode")
    if draw(st.integers(0, 4)) == 0:  # a truncated or garbled report
        text = text[:draw(st.integers(0, len(text)))] + draw(
            st.sampled_from(["", "<", "&bogus;", "\x00", "</x>"]))
    return text, cases, suites


def _admitted_only_when_each_required_check_passed_once(report, cases, decisions,
                                                        required=None):
    for d in decisions:
        if not d.admitted:
            assert d.reasons, d
            continue
        must = required or report.required(d.node)
        assert must, d
        for check in must:
            outcomes = [o for c, o in cases.get(d.node, []) if c == check]
            assert outcomes == ["passed"], (d, check, outcomes)


def test_any_junit_text_is_decisions_or_a_report_error(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("junit")

    @BOUNDED
    @given(reports(), st.one_of(st.none(), st.lists(CHECK_NAMES, max_size=3)),
           st.one_of(st.none(), st.lists(NODES, max_size=3, unique=True)),
           st.dictionaries(NODES, st.text(max_size=5), max_size=2))
    def one(generated, required, inventory_nodes, quarantined):
        text, cases, suites = generated
        path = tmp / "junit.xml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        try:
            report = read_junit(path)
        except ReportError as e:
            assert str(e).startswith(str(path)), str(e)
            return
        assert isinstance(report, Report)
        # Only a complete report burnin wrote, of one run, is read at all.
        assert suites and all(p.get("burnin_report") and p.get("run_id")
                              and p.get("complete") == "true" for p in suites), suites
        assert len({p["run_id"] for p in suites}) == 1
        decisions = decide(report, required or None, inventory_nodes,
                           quarantined=quarantined)
        names = [d.node for d in decisions]
        assert len(names) == len(set(names)) and set(report.cases) <= set(names)
        _admitted_only_when_each_required_check_passed_once(report, cases, decisions,
                                                            required or None)
        for d in decisions:
            if d.admitted:
                assert d.node not in quarantined
                assert inventory_nodes is None or d.node in inventory_nodes
    one()


SEEN: dict = {}  # (every required check passed once, neither held nor a stranger): nodes


def test_the_admission_property_holds_on_well_formed_trusted_reports(tmp_path_factory):
    """The generator above mostly makes reports admit refuses whole; here every report is
    one burnin would accept, so that the per-node property is exercised."""
    tmp = tmp_path_factory.mktemp("trusted")
    trusted = {"burnin_report": "1", "run_id": "r1", "complete": "true"}

    # Per check, its testcases' outcomes: mostly one passed; else none, two, or not passed.
    outcomes = st.sampled_from([["passed"]] * 8 + [[], ["passed", "passed"], ["failure"],
                                                   ["skipped"], ["error"],
                                                   ["passed", "failure"],
                                                   ["failure+skipped"]])
    rows = st.tuples(outcomes, outcomes, outcomes).map(
        lambda t: [(check, o) for check, got in zip(("health", "sdc", "burn"), t, strict=True)
                   for o in got])

    @BOUNDED
    @given(st.dictionaries(NODES, st.tuples(rows, st.booleans()), min_size=1, max_size=3),
           st.sampled_from(["0", "8", "unknown"]),
           st.sampled_from(["health,sdc", "health", "sdc,burn", ""]),
           st.one_of(st.none(), st.sets(NODES, min_size=2)))
    def one(nodes, gpus, require, inventory):
        cases = {node: rows for node, (rows, _) in nodes.items()}
        quarantined = {node for node, (_, held) in nodes.items() if held}
        root = ET.Element("testsuites")
        for node, rows in cases.items():
            suite = ET.SubElement(root, "testsuite", name=node)
            props = ET.SubElement(suite, "properties")
            for k, v in {**trusted, "gpus": gpus, "nodes_in_run": "1",
                         "admission_require": require}.items():
                ET.SubElement(props, "property", name=k, value=v)
            for check, outcome in rows:
                case = ET.SubElement(suite, "testcase", name=check)
                for tag in outcome.split("+"):
                    if tag != "passed":
                        ET.SubElement(case, tag, message="m")
        path = tmp / "junit.xml"
        path.write_text(ET.tostring(root, encoding="unicode"))
        report = read_junit(path)
        held = {n: "held by hand" for n in quarantined}
        listed = None if inventory is None else sorted(inventory)
        decisions = decide(report, inventory_nodes=listed, quarantined=held)
        _admitted_only_when_each_required_check_passed_once(report, cases, decisions)
        for d in decisions:  # and conversely: everything passed once is admitted
            if d.node not in cases:
                assert not d.admitted and d.reasons == ("no testsuite in the report",)
                continue
            must = report.required(d.node)
            passed = all([o for c, o in cases[d.node] if c == ch] == ["passed"] for ch in must)
            welcome = d.node not in held and (inventory is None or d.node in inventory)
            assert d.admitted == (passed and welcome), d
            SEEN[passed, welcome] = SEEN.get((passed, welcome), 0) + 1
    one()
    assert all(SEEN.get(k) for k in ((True, True), (True, False), (False, True))), SEEN


# --- probe documents against their declared shapes --------------------------------------

def conforms(shape, value) -> bool:
    """What the shape declares, said once more as plainly as possible."""
    if value is None:
        return shape.null
    if isinstance(shape, Num):
        if not shape.finite and isinstance(value, str) and value in NONFINITE:
            return True
        if isinstance(value, bool) or not isinstance(value, int if shape.integer
                                                     else (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return (shape.lo is None or value >= shape.lo) and (shape.hi is None
                                                            or value <= shape.hi)
    if isinstance(shape, Str):
        return isinstance(value, str) and len(value) <= shape.max
    if isinstance(shape, Bool):
        return isinstance(value, bool)
    if isinstance(shape, Scalar):
        return isinstance(value, (bool, int, float)) or (isinstance(value, str)
                                                         and len(value) <= 4096)
    if isinstance(shape, List):
        return (isinstance(value, list) and shape.min <= len(value) <= shape.max
                and all(conforms(shape.item, v) for v in value))
    assert isinstance(shape, Obj), shape
    if not isinstance(value, dict) or len(value) > shape.max_keys:
        return False
    if any(k not in value for k in shape.required):
        return False
    for k, v in value.items():
        s = shape.fields.get(k, shape.values)
        if s is not None and not conforms(s, v):
            return False
    return True


def _build(draw, shape, places: list, depth: int = 0, null: bool = True):
    """A value that fits `shape`; every place in it is listed as (container, key, shape)."""
    if null and shape.null and draw(st.integers(0, 9)) == 0:
        return None
    if isinstance(shape, Num):
        lo = -1e6 if shape.lo is None else shape.lo
        hi = 1e6 if shape.hi is None else min(shape.hi, 1e18)
        if not shape.finite and draw(st.integers(0, 4)) == 0:
            return draw(st.sampled_from(NONFINITE))
        edges = [v for v in (shape.lo, shape.hi) if v is not None and abs(v) <= 1e18]
        if edges and draw(st.integers(0, 3)) == 0:
            return draw(st.sampled_from(edges))
        if shape.integer:
            return draw(st.integers(math.ceil(lo), math.floor(hi)))
        return draw(st.floats(lo, hi, allow_nan=False, allow_infinity=False))
    if isinstance(shape, Str):
        return draw(st.text(max_size=min(shape.max, 8)))
    if isinstance(shape, Bool):
        return draw(st.booleans())
    if isinstance(shape, Scalar):
        return draw(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=6)))
    if isinstance(shape, List):
        n = draw(st.integers(min(shape.min, 3), min(shape.max, 3)))
        items = [None] * n
        for i in range(n):
            items[i] = _build(draw, shape.item, places, depth + 1)
            places.append((items, i, shape.item))
        return items
    assert isinstance(shape, Obj)
    out: dict = {}
    for key, sub in shape.fields.items():
        if key in shape.required or draw(st.integers(0, 2)):
            out[key] = _build(draw, sub, places, depth + 1)
            places.append((out, key, sub))
    for key in shape.required:
        if key not in out:
            out[key] = draw(JSON_SCALARS)
    if shape.values is not None:
        for i in range(draw(st.integers(0, 2))):
            key = f"extra{i}"
            out[key] = _build(draw, shape.values, places, depth + 1)
            places.append((out, key, shape.values))
    return out


# Ways a value can miss its shape, each the business of one guard; and values exactly at
# a bound, which must pass (a guard off by one refuses them).
MISSES = ("nan", "inf", "below", "above", "at lo", "at hi", "boolean", "text", "fraction",
          "word", "null", "long", "at max", "short", "many keys", "at max keys", "missing",
          "wrong type", "none")


def _applies(shape, miss: str) -> bool:
    if miss == "null":
        return True
    if isinstance(shape, Num):
        return (miss in ("nan", "inf", "boolean", "text", "word", "wrong type")
                or (miss in ("below", "at lo") and shape.lo is not None)
                or (miss in ("above", "at hi") and shape.hi is not None)
                or (miss == "fraction" and shape.integer))
    if isinstance(shape, Str):
        return miss in ("long", "at max", "text", "wrong type", "boolean")
    if isinstance(shape, Bool):
        return miss in ("boolean", "text", "wrong type")
    if isinstance(shape, Scalar):
        return miss in ("long", "at max", "wrong type")
    if isinstance(shape, List):
        return (miss in ("wrong type", "nan") or (miss in ("long", "at max")
                                                   and shape.max <= 2000)
                or (miss == "short" and shape.min > 0))
    return (miss == "wrong type" or (miss in ("many keys", "at max keys")
                                     and shape.max_keys <= 2000)
            or (miss == "missing" and bool(shape.required)))


def _near_miss(draw, shape, miss: str):
    """`shape`'s value wrong in the one way `miss` names (or exactly at a bound)."""
    if miss == "null":
        return None
    if miss == "wrong type":
        return {} if isinstance(shape, (List, Bool)) else []
    if isinstance(shape, Num):
        return {"nan": float("nan"), "inf": draw(st.sampled_from([float("inf"),
                                                                   float("-inf")])),
                "below": shape.lo is not None and shape.lo - 1, "at lo": shape.lo,
                "above": shape.hi is not None and shape.hi + 1, "at hi": shape.hi,
                "boolean": True, "text": "1", "fraction": 0.5, "word": "nan"}[miss]
    if isinstance(shape, Str):
        return {"long": "s" * (shape.max + 1), "at max": "s" * shape.max, "text": 1,
                "boolean": True}[miss]
    if isinstance(shape, Bool):
        return {"boolean": 1, "text": "true"}[miss]
    if isinstance(shape, Scalar):
        return {"long": "s" * 4097, "at max": "s" * 4096}[miss]
    if isinstance(shape, List):
        if miss == "nan":
            return [float("nan")]
        item = _build(draw, shape.item, [], null=False)
        return [item] * {"long": shape.max + 1, "at max": shape.max, "short": shape.min - 1}[miss]
    whole = _build(draw, shape, [], null=False)
    if miss == "missing":
        key = draw(st.sampled_from(shape.required))
        return {k: v for k, v in whole.items() if k != key}
    filler = _build(draw, shape.values, [], null=False) if shape.values else 0
    for i in range(shape.max_keys - len(whole) + (miss == "many keys")):
        whole[f"k{i}"] = filler
    return whole


@st.composite
def documents(draw, shape, miss: str):
    """A document of `shape` with one place in it missing its shape in the way `miss` names
    (or at a bound), where the document has such a place."""
    places: list = []
    doc = _build(draw, shape, places)
    candidates = [(c, k, sub) for c, k, sub in places if _applies(sub, miss)]
    if miss != "none" and candidates:
        container, key, sub = draw(st.sampled_from(candidates))
        container[key] = _near_miss(draw, sub, miss)
    return doc


SHAPES = {name: check.schema for name, check in CHECKS.items()}
SHAPES["burn"] = burn_shape(4)  # burn's runs use a bound of the node's sample count


def test_every_shape_of_every_check_judges_any_document_without_raising():
    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(sorted(SHAPES)), JSON)
    def one(check, value):
        problem = SHAPES[check].problem(value, "")
        assert isinstance(problem, str)
        assert (problem == "") == conforms(SHAPES[check], value), (problem, value)
    one()


@pytest.mark.parametrize("miss", MISSES)
def test_a_document_a_shape_accepts_has_every_declared_field_of_its_declared_type(miss):
    """For every check's shape: documents that fit, and documents that miss it in one way
    (a NaN, a number past a bound, a string or list too long, a key missing, too many
    keys, a wrong type, a null) or sit exactly at a bound. The shape accepts exactly
    those that fit."""
    checks = st.sampled_from(sorted(SHAPES))

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(checks.flatmap(lambda c: st.tuples(st.just(c), documents(SHAPES[c], miss))))
    def one(generated):
        check, doc = generated
        problem = SHAPES[check].problem(doc, "")
        assert isinstance(problem, str)
        assert (problem == "") == conforms(SHAPES[check], doc), (check, problem)
    one()
