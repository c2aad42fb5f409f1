"""burnin/probe/shapes.py: the declared shapes of probe documents, and what each says is wrong."""

from __future__ import annotations

import pytest

from burnin.probe.shapes import (
    COUNT,
    MAX_DEVICES,
    MAX_STR,
    MESSAGES,
    NULL_COUNT,
    Bool,
    Int,
    List,
    Num,
    Obj,
    Scalar,
    Shape,
    Str,
    document,
)


@pytest.mark.parametrize("shape,value,problem", [
    (Num(), 1, ""), (Num(), 1.5, ""), (Num(), -1e300, ""),
    (Num(), "1", "x: expected a number, got string '1'"),
    (Num(), True, "x: expected a number, got a boolean"),
    (Num(), False, "x: expected a number, got a boolean"),
    (Num(), [1], "x: expected a number, got a list"),
    (Num(), {}, "x: expected a number, got an object"),
    (Num(), None, "x: expected a number, got null"),
    (Num(null=True), None, ""),
    (Num(), float("nan"), "x: expected a finite number, got nan"),
    (Num(), float("inf"), "x: expected a finite number, got inf"),
    (Num(), float("-inf"), "x: expected a finite number, got -inf"),
    (Num(0, 10), 0, ""), (Num(0, 10), 10, ""), (Num(0, 10), 10.0, ""),
    (Num(0, 10), -0.5, "x: expected a number from 0 to 10, got -0.5"),
    (Num(0, 10), 10.5, "x: expected a number from 0 to 10, got 10.5"),
    (Num(0, 10), 11, "x: expected a number from 0 to 10, got 11"),
    (Num(0), -1, "x: expected a number >= 0, got -1"),
    (Num(0), 1e300, ""),
    (Num(None, 5), 6, "x: expected a number, got 6"),
    (Num(None, 5), -1e300, ""),
    (Num(1.5, 2.5), "a", "x: expected a number from 1.5 to 2.5, got string 'a'"),
    (Num(finite=False), "nan", ""), (Num(finite=False), "inf", ""),
    (Num(finite=False), "-inf", ""), (Num(finite=False), 2.0, ""),
    (Num(finite=False), "NaN", "x: expected a number, got string 'NaN'"),
    (Num(), "nan", "x: expected a number, got string 'nan'"),
    (Num(finite=False), float("nan"), "x: expected a finite number, got nan"),
    (Int(), 3, ""), (Int(), 0, ""),
    (Int(), 3.0, "x: expected an integer >= 0, got number 3.0"),
    (Int(), -1, "x: expected an integer >= 0, got -1"),
    (Int(), True, "x: expected an integer >= 0, got a boolean"),
    (Int(1, 1), 1, ""), (Int(1, 1), 2, "x: expected an integer from 1 to 1, got 2"),
    (Int(lo=None), -5, ""), (Int(lo=None), "5", "x: expected an integer, got string '5'"),
    (Int(null=True), None, ""), (Int(), None, "x: expected an integer >= 0, got null"),
    (COUNT, 2**63, ""), (COUNT, 2**63 + 1,
                         "x: expected an integer from 0 to 9.22337e+18, got 9223372036854775809"),
    (NULL_COUNT, None, ""),
])
def test_num(shape, value, problem):
    assert shape.problem(value, "x") == problem


def test_int_is_a_finite_integer_not_null_unless_asked():
    # Built here, in the test, not at import: each call of Int() is what is tested.
    assert Int() == Num(0, None, False, True, True)
    assert Int().problem("nan", "x") == "x: expected an integer >= 0, got string 'nan'"
    assert Int().problem(None, "x") == "x: expected an integer >= 0, got null"
    assert Int(null=True).problem(None, "x") == ""
    assert Int(1, 5).problem(6, "x") == "x: expected an integer from 1 to 5, got 6"
    assert Int(lo=None).problem(-3, "x") == ""


def test_the_kind_of_a_value_is_said_in_words():
    assert Num().problem("y" * 100, "p") == f"p: expected a number, got string {'y' * 40!r}"
    assert Num().problem(b"raw", "p") == "p: expected a number, got bytes"
    assert Num().problem(object(), "p") == "p: expected a number, got object"


@pytest.mark.parametrize("shape,value,problem", [
    (Str(), "", ""), (Str(3), "abc", ""),
    (Str(3), "abcd", "x: string of 4 characters, at most 3 expected"),
    (Str(), 3, "x: expected a string, got number 3"),
    (Str(), None, "x: expected a string, got null"), (Str(null=True), None, ""),
    (Str(), "a" * MAX_STR, ""),
    (Str(), "a" * (MAX_STR + 1), f"x: string of {MAX_STR + 1} characters, at most {MAX_STR} "
                                 "expected"),
    (Bool(), True, ""), (Bool(), False, ""),
    (Bool(), 1, "x: expected true or false, got number 1"),
    (Bool(), "true", "x: expected true or false, got string 'true'"),
    (Bool(), None, "x: expected true or false, got null"), (Bool(null=True), None, ""),
    (Scalar(), None, ""), (Scalar(), True, ""), (Scalar(), 1, ""), (Scalar(), 1.5, ""),
    (Scalar(), "s" * 4096, ""),
    (Scalar(), "s" * 4097, "x: string of 4097 characters, at most 4096 expected"),
    (Scalar(), [], "x: expected a plain value, got a list"),
    (Scalar(), {}, "x: expected a plain value, got an object"),
])
def test_str_bool_scalar(shape, value, problem):
    assert shape.problem(value, "x") == problem


@pytest.mark.parametrize("shape,value,problem", [
    (List(Int()), [], ""), (List(Int()), [1, 2], ""),
    (List(Int()), [1, "2"], "x[1]: expected an integer >= 0, got string '2'"),
    (List(Int()), [-1, "2"], "x[0]: expected an integer >= 0, got -1"),
    (List(Int()), {}, "x: expected a list, got an object"),
    (List(Int()), None, "x: expected a list, got null"),
    (List(Int(), null=True), None, ""),
    (List(Int(), max=2), [1, 2], ""),
    (List(Int(), max=2), [1, 2, 3], "x: 3 items, at most 2 expected"),
    (List(Int()), [0] * 10_000, ""),
    (List(Int()), [0] * 10_001, "x: 10001 items, at most 10000 expected"),
    (List(Num(), min=2, max=2), [1, 2], ""),
    (List(Num(), min=2, max=2), [1], "x: 1 items, expected 2 to 2"),
    (List(Num(), min=2, max=3), [1, 2, 3, 4], "x: 4 items, expected 2 to 3"),
    (List(Num(), min=2, max=3), [1, 2, 3], ""),
])
def test_list(shape, value, problem):
    assert shape.problem(value, "x") == problem


def test_list_and_object_say_what_they_expect():
    assert List(Int()).expected() == "a list" and Obj().expected() == "an object"
    assert Str().expected() == "a string" and Bool().expected() == "true or false"
    assert Scalar().expected() == "a plain value"
    assert Num().expected() == "a number" and Int(None).expected() == "an integer"


def test_obj():
    shape = Obj(required=("a",), a=Int(), b=Str(2), values=None)
    assert shape.problem({"a": 1}, "") == ""
    assert shape.problem({"a": 1, "b": "ok", "other": [object()]}, "") == "", \
        "keys the shape does not name are allowed"
    assert shape.problem({"b": "ok"}, "") == "a: missing"
    assert shape.problem({"b": "ok"}, "top") == "top.a: missing"
    assert shape.problem({"a": "1"}, "top") == "top.a: expected an integer >= 0, got string '1'"
    assert shape.problem({"a": 1, "b": "long"}, "") == \
        "b: string of 4 characters, at most 2 expected"
    assert shape.problem([], "top") == "top: expected an object, got a list"
    assert shape.problem(None, "top") == "top: expected an object, got null"
    assert Obj(null=True).problem(None, "top") == ""
    free = Obj(values=Int(), named=Str())
    assert free.problem({"named": "s", "k1": 1, "k2": 2}, "m") == ""
    assert free.problem({"named": "s", "k1": 1, "k2": "2"}, "m") == \
        "m.k2: expected an integer >= 0, got string '2'"
    assert free.problem({"named": 1}, "m") == "m.named: expected a string, got number 1"


def test_obj_bounds_its_keys():
    assert Obj(max_keys=2).problem({"a": 1, "b": 2}, "o") == ""
    assert Obj(max_keys=2).problem({"a": 1, "b": 2, "c": 3}, "o") == \
        "o: 3 keys, at most 2 expected"
    assert Obj().problem({str(i): i for i in range(1000)}, "o") == ""
    assert Obj().problem({str(i): i for i in range(1001)}, "o") == \
        "o: 1001 keys, at most 1000 expected"


def test_obj_reports_the_first_problem_in_document_order():
    shape = Obj(a=Int(), b=Int())
    assert shape.problem({"b": "x", "a": "y"}, "") == "b: expected an integer >= 0, got string 'x'"


def test_a_shape_must_say_what_it_expects():
    with pytest.raises(NotImplementedError):
        Shape().expected()
    with pytest.raises(NotImplementedError):
        Shape().problem(1, "x")
    with pytest.raises(NotImplementedError):
        Shape().problem(None, "x")


def test_the_envelope_of_every_probe_document():
    doc = document(Obj(t=Num()), Obj(f=Int()))
    good = {"probe": "sdc", "schema": 1, "node": {"host": "n1", "cores": 8, "gpu": None},
            "devices": [{"t": 1.0}], "figures": {"f": 1}, "errors": ["e"]}
    assert doc.problem(good, "") == ""
    for key in ("probe", "schema", "node", "devices", "figures", "errors"):
        assert doc.problem({k: v for k, v in good.items() if k != key}, "") == f"{key}: missing"
    assert doc.problem({**good, "schema": 2}, "") == \
        "schema: expected an integer from 1 to 1, got 2"
    assert doc.problem({**good, "probe": "p" * 65}, "") == \
        "probe: string of 65 characters, at most 64 expected"
    assert doc.problem({**good, "node": {"x": [1]}}, "") == \
        "node.x: expected a plain value, got a list"
    assert doc.problem({**good, "devices": [{"t": "1"}]}, "") == \
        "devices[0].t: expected a number, got string '1'"
    assert doc.problem({**good, "devices": [{}] * MAX_DEVICES}, "") == ""
    assert doc.problem({**good, "devices": [{}] * (MAX_DEVICES + 1)}, "") == \
        f"devices: {MAX_DEVICES + 1} items, at most {MAX_DEVICES} expected"
    assert doc.problem({**good, "figures": {"f": -1}}, "") == \
        "figures.f: expected an integer >= 0, got -1"
    assert doc.problem({**good, "errors": [1]}, "") == \
        "errors[0]: expected a string, got number 1"
    assert MESSAGES.problem(["e" * 4097], "errors") == \
        "errors[0]: string of 4097 characters, at most 4096 expected"
    node = document(Obj(), Obj(), node=Obj(host=Str(3)))
    assert node.problem({**good, "node": {"host": "long"}}, "") == \
        "node.host: string of 4 characters, at most 3 expected"
