"""tests/mutation.py's reading of tests/equivalent_mutants.txt: a line excuses the survivor
whose code holds its text, under the line's own number or, after an edit renumbered the
function's mutants, the one mutant of that function holding the text; a text several or
no mutants hold excuses none, and a line that excuses no survivor fails --score."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mutation  # noqa: E402  (tests/mutation.py, a script beside this file)

SOURCE = '''\
def x_f__mutmut_orig(d):
    return d.get("nodes", 0) >= 3
def x_f__mutmut_1(d):
    return d.get("XXnodesXX", 0) >= 3
def x_f__mutmut_2(d):
    return d.get("nodes", 1) >= 3
def x_f__mutmut_3(d):
    return d.get("nodes", 0) > 3
def x_f__mutmut_4(d):
    return d.get("nodes", 0) >= 4
def x_f__mutmut_5(d):
    return d.get("nodes", 1) > 3
'''


@pytest.fixture
def repo(tmp_path, monkeypatch):
    (tmp_path / "mutants" / "burnin").mkdir(parents=True)
    (tmp_path / "mutants" / "burnin" / "m.py").write_text(SOURCE)
    monkeypatch.setattr(mutation, "REPO", tmp_path)
    monkeypatch.setattr(mutation, "SLOW_RESULTS", tmp_path / "mutants" / "slow-tier.json")
    monkeypatch.setattr(mutation, "EQUIVALENT", tmp_path / "equivalent_mutants.txt")
    return tmp_path


def listing(repo: Path, *lines: str) -> dict:
    (repo / "equivalent_mutants.txt").write_text("## a reason\n" + "\n".join(lines) + "\n")
    return mutation.listed()


def test_a_line_names_its_own_mutant_or_the_one_that_holds_its_text(repo):
    known = listing(repo, 'burnin.m.x_f__mutmut_2 get("nodes", 1)',
                    'burnin.m.x_f__mutmut_1 >= 4')  # renumbered: now mutant 4
    cache: dict = {}
    assert mutation.explain("burnin.m.x_f__mutmut_2", known, cache) == (
        "a reason", "burnin.m.x_f__mutmut_2")
    assert mutation.explain("burnin.m.x_f__mutmut_4", known, cache) == (
        "a reason", "burnin.m.x_f__mutmut_1")
    assert mutation.explain("burnin.m.x_f__mutmut_1", known, cache) is None
    assert mutation.explain("burnin.m.x_f__mutmut_3", known, cache) is None


def test_a_text_no_mutant_or_several_hold_excuses_none(repo):
    known = listing(repo, 'burnin.m.x_f__mutmut_1 get("nodes", 2)',  # no mutant holds it
                    "burnin.m.x_f__mutmut_3 >= 3")  # the original holds it
    cache: dict = {}
    assert all(mutation.explain(f"burnin.m.x_f__mutmut_{n}", known, cache) is None
               for n in (1, 2, 3, 4, 5))
    known = listing(repo, 'burnin.m.x_f__mutmut_9 "nodes", 1)')  # mutants 2 and 5 hold it
    assert mutation.explain("burnin.m.x_f__mutmut_2", known, {}) is None


def score(repo: Path, codes: dict, *lines: str) -> int:
    listing(repo, *lines)
    (repo / "mutants" / "burnin" / "m.py.meta").write_text(json.dumps(
        {"exit_code_by_key": {f"burnin.m.x_f__mutmut_{n}": c for n, c in codes.items()}}))
    return mutation.score([])


def test_score_passes_with_a_renumbered_line_and_fails_on_a_line_that_excuses_nothing(
        repo, capsys):
    killed, survived = 1, 0
    assert score(repo, {1: killed, 2: killed, 3: killed, 4: survived, 5: killed},
                 "burnin.m.x_f__mutmut_1 >= 4") == 0
    assert "burnin.m.x_f__mutmut_1 is now x_f__mutmut_4" in capsys.readouterr().out
    assert score(repo, {1: killed, 2: killed, 3: killed, 4: killed, 5: killed},
                 "burnin.m.x_f__mutmut_1 >= 4") == 1  # killed now: the line is stale
    assert score(repo, {1: killed, 2: killed, 3: survived, 4: killed, 5: killed},
                 "burnin.m.x_f__mutmut_1 >= 4") == 1  # a survivor nobody explained
