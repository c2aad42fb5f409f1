"""The words that say where a train replica left the reference rank
(burnin/checks/train.py, `located`), which mutation testing found untested: one tensor
or several, none, and the other tensors beside the one compared element by element."""

from __future__ import annotations

from burnin.checks.train import located


def event(elements: dict, tensors: dict) -> dict:
    return {"step": 3, "where": {"reference_rank": 0, "tensor": "tok.weight", "numel": 2048,
                                 "elements": elements, "tensors": tensors}}


def test_a_rank_that_differs_elsewhere_names_its_tensors():
    assert located(event({}, {"1": ["pos.weight", "out.bias"]}), 1) == \
        "; its pos.weight, out.bias differ from rank 0's"
    assert located(event({}, {"1": ["pos.weight"]}), 1) == "; its pos.weight differs from rank 0's"
    assert located(event({}, {"1": []}), 1) == ""
    assert located(event({}, {}), 1) == ""
    assert located({"step": 3}, 1) == ""


def test_the_other_tensors_that_differ_are_named_beside_the_elements():
    found = {"1": {"count": 2, "first": 5, "last": 9}}
    assert located(event(found, {"1": ["tok.weight", "pos.weight", "out.bias"]}), 1) == (
        "; 2 of tok.weight's 2048 elements differ from rank 0's (elements 5 to 9); other "
        "tensors that differ: pos.weight, out.bias")
    assert located(event({"1": {"count": 1, "first": 11, "last": 11}}, {"1": ["tok.weight"]}),
                   1) == "; 1 of tok.weight's 2048 elements differs from rank 0's (element 11)"
