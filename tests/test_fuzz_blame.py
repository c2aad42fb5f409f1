"""A node's document can only fail that node: a fuzzer that mutates one node's document of
every check (fields missing, types changed within and beyond the schema, extreme numbers,
odd keys, hostile text) and runs it through the real parse, schema, fleet figures and
judges beside two honest nodes. Whatever it does, no exception escapes and the honest
nodes' verdicts are the ones they get beside an honest third.

The seed corpus is tests/corpus/ (real probe documents). The test runs a bounded number
of examples per check; a longer run by hand:

    BURNIN_FUZZ_EXAMPLES=20000 pytest tests/test_fuzz_blame.py -q -s
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burnin.checks import CHECKS
from burnin.engine.run import Run
from burnin.inventory.schema import load_inventory
from burnin.probe.protocol import judge_output
from burnin.transports import CommandResult

CORPUS = Path(__file__).resolve().parent / "corpus"
EXAMPLES = int(os.environ.get("BURNIN_FUZZ_EXAMPLES", "40"))
SEEDS = sorted((p.name.split(".")[0], p.name.split(".")[1]) for p in CORPUS.glob("*.json"))
TINY = {"sdc": {"duration_s": 0.3, "n": 64, "random_repeats": 2},
        "burn": {"duration_s": 1, "n": 64, "sample_s": 0.25},
        "allreduce": {"max_bytes": 65536, "seconds_per_size": 0.02}}
TRIED: dict[str, int] = {}

ODD_VALUES = st.one_of(
    st.sampled_from([0, -1, 1, 2**63, -2**63, 2**64, 10**400, 1e308, -1e308, 5e-324, 0.0,
                     float("nan"), float("inf"), float("-inf"), True, False, None, "", "nan",
                     "inf", "\ud800", "\udfff x", "\u202egnorw", "a\nb\rc", "\x1b[2J\x07\x00",
                     "A" * 5000, [], {}, [[[]]], {"": {}}]),
    st.integers(), st.floats(), st.text(max_size=12))
ODD_KEYS = st.one_of(st.sampled_from(["", "0", "-1", "1e3", "nan", "\ud800", "\u202e",
                                      "a\nb", "__class__", "devices", "x" * 300]),
                     st.text(max_size=8))


def _paths(doc, at=()):
    """Every place in a JSON tree, as a tuple of keys and indices (the root is ())."""
    yield at
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*at, i))


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


@st.composite
def mutants(draw, doc):
    """`doc` with one to three mutations, each at a place drawn from the whole tree."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, key = _get(doc, path[:-1]), path[-1]
        what = draw(st.sampled_from(["delete", "replace", "wrap", "odd key", "repeat",
                                     "empty"]))
        value = parent[key]
        if what == "delete":
            del parent[key]
        elif what == "replace":
            parent[key] = copy.deepcopy(draw(ODD_VALUES))  # [] and {} are shared: a later
            # mutation in place must not change them for the next example
        elif what == "wrap":
            parent[key] = [value]
        elif what == "odd key" and isinstance(value, dict):
            value[draw(ODD_KEYS)] = copy.deepcopy(draw(ODD_VALUES))
        elif what == "repeat" and isinstance(value, list) and value:
            value.extend(value[:1] * draw(st.integers(1, 70)))
        elif what == "empty":
            parent[key] = type(value)() if isinstance(value, (dict, list, str)) else 0
    return doc


def _encode(doc) -> bytes:
    # As a node would print it: json.dumps writes NaN and surrogates as Python allows.
    return json.dumps(doc).encode()


def _run(tmp: Path, kind: str) -> Run:
    inv = tmp / f"{kind}.yaml"
    if not inv.exists():
        gpus = 2 if kind == "gpu" else 0
        inv.write_text(json.dumps({
            "version": 1, "cluster": "fuzz", "checks": TINY,
            "defaults": {"transport": "local", "gpus": gpus},
            "quarantine": {"ledger": str(tmp / "ledger.db")},
            "nodes": [{"name": "n[1-3]"}]}))
    inventory = load_inventory(inv)
    return Run(inventory, list(inventory.nodes), "quick", tmp / "reports", "fuzz")


def _outcomes(run: Run, check: str, docs: dict[str, bytes]):
    spec = CHECKS[check]
    out = {}
    for node in run.nodes:
        s = run.settings(check, node)
        result = CommandResult(0, docs[node.name], b"", 1.0)
        out[node.name] = judge_output(node.name, spec.probe_name, result,
                                      float(s["timeout_s"]),
                                      spec.output_limit(s, run.devices(node)),
                                      spec.schema_for(s, run.devices(node)))
    return out


def _verdicts(tmp: Path, kind: str, check: str, docs: dict[str, bytes]) -> dict:
    run = _run(tmp, kind)
    run.store._outcomes[check] = _outcomes(run, check, docs)
    return {n.name: run.verdict(check, n) for n in run.nodes}


@pytest.mark.parametrize("check,kind", SEEDS, ids=[f"{c}-{k}" for c, k in SEEDS])
def test_one_mutated_document_changes_no_other_nodes_verdict(tmp_path_factory, check, kind,
                                                             finding):
    seed = json.loads((CORPUS / f"{check}.{kind}.json").read_text())
    tmp = tmp_path_factory.mktemp(f"fuzz-{check}-{kind}")
    honest = _encode(seed)
    base = _verdicts(tmp, kind, check, {"n1": honest, "n2": honest, "n3": honest})
    assert base["n1"].failures == base["n2"].failures == base["n3"].failures

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get(
        "BURNIN_FUZZ_EXAMPLES"), suppress_health_check=list(HealthCheck), database=None)
    @given(mutants(seed))
    def one(doc):
        TRIED[check] = TRIED.get(check, 0) + 1
        verdicts = _verdicts(tmp, kind, check, {"n1": honest, "n2": honest,
                                                "n3": _encode(doc)})
        for node in ("n1", "n2"):
            assert verdicts[node].failures == base[node].failures, (node, verdicts[node])
            assert not getattr(verdicts[node], "skipped", "")
        for text in verdicts["n3"].failures + verdicts["n3"].warnings:
            text.encode("utf-8")  # what the ledger and junit.xml will write
    one()
    finding(f"fuzz {check} ({kind} node): {TRIED.get(check, 0)} mutated documents so far, "
            "no exception, no other node's verdict changed")


def test_the_corpus_holds_every_check_that_judges_a_node_document():
    judged = {c for c, _ in SEEDS}
    expected = {name for name, c in CHECKS.items() if not c.group and name != "dcgm"}
    assert judged == expected, "record the corpus again: python tests/corpus/record.py"
