"""burnin/core/safetext.py and burnin/model/verdict.py: text and numbers from nodes, made
safe once."""

from __future__ import annotations

import pytest

from burnin.core.safetext import MAX_DEPTH, UnsafeDocument, safe_document, safe_text
from burnin.model.verdict import Verdict, assert_passed, clean, majority


@pytest.mark.parametrize("raw,multiline,shown", [
    ("plain text", True, "plain text"),
    ("GPU \x1b[2Jfine\x07\x00", True, "GPU \\x1b[2Jfine\\x07\\x00"),
    ("a\nb\tc", True, "a\nb\tc"),               # kept where lines are allowed
    ("a\nb\tc\rd", False, "a\\x0ab\\x09c\\x0dd"),  # escaped in a single-line field
    ("\x08\x0b\x1f\x7f\x85\x9f", True, "\\x08\\x0b\\x1f\\x7f\\x85\\x9f"),
    ("\xa0é", True, "\xa0é"),                   # printable Latin-1 stays
    ("\u202egnorw\u202c", True, "\\u202egnorw\\u202c"),
    ("\u061c\u200e\u200f\u202a\u2066\u2069", True, "\\u061c\\u200e\\u200f\\u202a\\u2066\\u2069"),
    ("lone \ud800 and \udfff", True, "lone \ufffd and \ufffd"),
    ("\ud83d\ude00", False, "\ufffd\ufffd"),     # a surrogate pair in a str is two lone ones
])
def test_safe_text_escapes_what_would_drive_a_terminal_and_replaces_surrogates(
        raw, multiline, shown):
    assert safe_text(raw, multiline=multiline) == shown
    assert safe_text(raw, multiline) == shown
    shown.encode("utf-8")  # what SQLite, XML and JSON writers need


def test_safe_text_is_multiline_by_default():
    assert safe_text("a\nb") == "a\nb"


def test_safe_document_copies_and_cleans_every_string_keys_too():
    doc = {"n\x1bame": ["a\nb", {"k\tey": "\u202e"}], "f": 1.5, "i": 3, "b": True,
           "z": None, "order": 1}
    out = safe_document(doc)
    assert out == {"n\\x1bame": ["a\\x0ab", {"k\\x09ey": "\\u202e"}], "f": 1.5, "i": 3,
                   "b": True, "z": None, "order": 1}
    assert list(out) == ["n\\x1bame", "f", "i", "b", "z", "order"]
    assert doc["n\x1bame"][0] == "a\nb", "the input is left as it was"
    assert safe_document("x\x07") == "x\\x07" and safe_document(2.5) == 2.5
    assert safe_document([]) == [] and safe_document({}) == {}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_safe_document_refuses_numbers_that_are_not_finite(bad):
    with pytest.raises(UnsafeDocument, match=r"a number that is not finite \((nan|inf|-inf)\)"):
        safe_document({"devices": [{"tflops": bad}]})


def _nest(kind: str, levels: int):
    doc: object = 1
    for _ in range(levels):
        doc = {"k": doc} if kind == "dict" else [doc]
    return doc


@pytest.mark.parametrize("kind", ["dict", "list"])
def test_safe_document_takes_max_depth_levels_and_refuses_one_more(kind):
    assert safe_document(_nest(kind, 3), max_depth=3) == _nest(kind, 3)
    with pytest.raises(UnsafeDocument, match="nested deeper than 3 levels"):
        safe_document(_nest(kind, 4), max_depth=3)
    assert safe_document(_nest(kind, MAX_DEPTH)) == _nest(kind, MAX_DEPTH)
    with pytest.raises(UnsafeDocument, match=f"nested deeper than {MAX_DEPTH} levels"):
        safe_document(_nest(kind, MAX_DEPTH + 1))


def test_safe_document_survives_a_depth_that_would_exhaust_the_stack():
    with pytest.raises(UnsafeDocument):
        safe_document(_nest("list", 100_000))


def test_unsafe_document_is_a_value_error():
    assert issubclass(UnsafeDocument, ValueError)


# --- verdict.py ----------------------------------------------------------------------

def test_a_verdict_cleans_what_it_quotes():
    v = Verdict("n1", "sdc", ("GPU \x1b[31m0", 3), ("w\u202e",), skipped="")
    assert v.failures == ("GPU \\x1b[31m0", "3") and v.warnings == ("w\\u202e",)
    assert v.skipped == "" and not v.passed
    assert clean("a\x00") == "a\\x00" and clean("a\nb") == "a\nb"


def test_a_verdict_passes_only_without_failures_and_unskipped():
    assert Verdict("n1", "sdc").passed
    assert Verdict("n1", "sdc", warnings=("only a warning",)).passed
    assert not Verdict("n1", "sdc", ("wrong",)).passed
    busy = Verdict("n1", "sdc", skipped="busy: held by run r2\x07")
    assert not busy.passed and busy.skipped == "busy: held by run r2\\x07"


@pytest.mark.parametrize("values,expected", [
    ({}, (None, "no node reported a value")),
    ({"a": "550"}, ("550", "")),
    ({"a": "550", "b": "550", "c": "535"}, ("550", "")),
    ({"a": "550", "b": "535"}, (None, "no majority (550 on 1 node(s), 535 on 1 node(s))")),
    ({"a": 1, "b": 1, "c": 2, "d": 2, "e": 3},
     (None, "no majority (1 on 2 node(s), 2 on 2 node(s))")),
    ({"a": 8, "b": 8, "c": 4, "d": 4, "e": 8}, (8, "")),
])
def test_majority_is_the_value_most_nodes_share_or_none_on_a_tie(values, expected):
    assert majority(values) == expected


def test_assert_passed_fails_with_every_message_and_prints_warnings(capsys):
    assert_passed(Verdict("n1", "burn", warnings=("hot",)))
    assert capsys.readouterr().out == "WARNING n1 burn: hot\n"
    with pytest.raises(pytest.fail.Exception) as e:
        assert_passed(Verdict("n1", "burn", ("slow", "hot"), ("w1", "w2")))
    assert str(e.value) == "slow\nhot"
    assert e.value.pytrace is False, "the verdict's messages are the report, not a traceback"
    # A helper used in assertions hides itself from the traceback pytest shows.
    helper = [en.frame.f_locals for en in e.traceback if "verdict" in en.frame.f_locals]
    assert helper and all(loc.get("__tracebackhide__") is True for loc in helper)
    assert capsys.readouterr().out == "WARNING n1 burn: w1\nWARNING n1 burn: w2\n"


def test_assert_passed_skips_a_node_not_judged():
    with pytest.raises(pytest.skip.Exception, match="busy: another run"):
        assert_passed(Verdict("n1", "burn", skipped="busy: another run"))
