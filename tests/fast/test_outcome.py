"""One outcome vocabulary (burnin/model/outcome.py): each output prints its own word from it,
and no other module keeps a table of outcome words."""

from __future__ import annotations

import ast
from pathlib import Path

from burnin.model.outcome import JUNIT_TAGS, RESULTS, Outcome

BURNIN = Path(__file__).resolve().parents[2] / "burnin"


def test_each_output_has_its_word():
    assert [o.junit for o in Outcome] == [None, "failure", "error", "skipped", None]
    assert [Outcome.of_junit(t) for t in ("", *JUNIT_TAGS)] == [
        Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED]
    # metrics.prom's `outcome` label values, as README documents them
    assert [o.value for o in RESULTS] == ["passed", "failed", "error", "skipped"]
    assert [o.word for o in Outcome] == ["passed", "failed", "error", "skipped", "not run"]
    assert [o for o in Outcome if o.bad] == [Outcome.FAILED, Outcome.ERROR]
    assert f"{Outcome.FAILED}" == "failed" == Outcome.FAILED


def test_no_module_but_the_vocabulary_spells_junits_failure():
    """'failure' is JUnit's word for a failed outcome: a module that spells it keeps a
    table of outcome words of its own (eight did, and "failed" became "failure" and back)."""
    spelled = []
    for path in BURNIN.rglob("*.py"):
        if path.name == "outcome.py":
            continue
        tree = ast.parse(path.read_text())
        spelled += [f"{path.relative_to(BURNIN)}:{n.lineno}" for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and n.value == "failure"]
    assert spelled == []
