"""Declared shapes of probe documents: probe output is untrusted input.

Each check declares what its probe's JSON must look like (types, ranges, lengths); a
document that does not fit fails that node with "malformed probe output: <field>: <why>",
and nothing downstream (fleet medians, majorities, reports) ever sees it. Keys a shape
does not name are allowed (newer probes may add figures), but only within the size bound
the probe runner enforces; every key a judge reads is named here.

    DOC = Obj(devices=List(Obj(tflops=Num(0, 1e5)), max=64), figures=Obj())
    DOC.problem(data, "")   # '' when it fits, else 'devices[3].tflops: expected ...'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_STR = 64 * 1024


def _kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class Shape:
    null = False

    def problem(self, value, path: str | tuple) -> str:
        """'' when `value` fits, else '<path>: <why>'. Inside a document the path is made
        only for a problem (a (parent, key or index) pair until then): a fleet's documents
        are mostly right, and formatting a path per value was half of checking them."""
        if value is None:
            return "" if self.null else f"{_text(path)}: expected {self.expected()}, got null"
        return self._problem(value, path)  # type: ignore[arg-type]  # a pair or a text: _text

    def expected(self) -> str:
        raise NotImplementedError

    def _problem(self, value, path: str) -> str:
        raise NotImplementedError


# How a probe writes a reading that is not a finite number (JSON has no NaN): a wrong
# element of a product can be NaN, and that is what the node must be able to say.
NONFINITE = ("nan", "inf", "-inf")


@dataclass(frozen=True)
class Num(Shape):
    """A number in [lo, hi]; with `finite` False also one of NONFINITE's words, how a
    probe writes NaN and the infinities (a document never holds a NaN itself)."""

    lo: float | None = None
    hi: float | None = None
    null: bool = False
    finite: bool = True
    integer: bool = False

    def expected(self) -> str:
        what = "an integer" if self.integer else "a number"
        if self.lo is not None and self.hi is not None:
            return f"{what} from {self.lo:g} to {self.hi:g}"
        if self.lo is not None:
            return f"{what} >= {self.lo:g}"
        return what

    def _problem(self, value, path):
        if not self.finite and value in NONFINITE:
            return ""
        ok_type = isinstance(value, int) if self.integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type:
            return f"{_text(path)}: expected {self.expected()}, got {_kind(value)}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{_text(path)}: expected a finite number, got {value}"
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            return f"{_text(path)}: expected {self.expected()}, got {value!r}"
        return ""


def Int(lo: float | None = 0, hi: float | None = None, null: bool = False) -> Num:  # noqa: N802
    return Num(lo, hi, null, True, True)


@dataclass(frozen=True)
class Str(Shape):
    max: int = MAX_STR
    null: bool = False

    def expected(self) -> str:
        return "a string"

    def _problem(self, value, path):
        if not isinstance(value, str):
            return f"{_text(path)}: expected a string, got {_kind(value)}"
        if len(value) > self.max:
            return (f"{_text(path)}: string of {len(value)} characters, at most {self.max} "
                    "expected")
        return ""


@dataclass(frozen=True)
class Bool(Shape):
    null: bool = False

    def expected(self) -> str:
        return "true or false"

    def _problem(self, value, path):
        return "" if isinstance(value, bool) else \
            f"{_text(path)}: expected true or false, got {_kind(value)}"


@dataclass(frozen=True)
class List(Shape):
    item: Shape
    max: int = 10_000
    null: bool = False
    min: int = 0

    def expected(self) -> str:
        return "a list"

    def _problem(self, value, path):
        if not isinstance(value, list):
            return f"{_text(path)}: expected a list, got {_kind(value)}"
        if not self.min <= len(value) <= self.max:
            if self.min:
                return f"{_text(path)}: {len(value)} items, expected {self.min} to {self.max}"
            return f"{_text(path)}: {len(value)} items, at most {self.max} expected"
        for i, v in enumerate(value):
            p = self.item.problem(v, (path, i))
            if p:
                return p
        return ""


class Obj(Shape):
    """An object whose named keys, when present, have their shapes; `required` keys must
    be present. `values`, when given, is the shape of every other value (a free-form map).
    """

    def __init__(self, required: tuple[str, ...] = (), values: Shape | None = None,
                 null: bool = False, max_keys: int = 1000, **fields: Shape):
        self.fields, self.required, self.values = fields, tuple(required), values
        self.null, self.max_keys = null, max_keys

    def expected(self) -> str:
        return "an object"

    def _problem(self, value, path):
        if not isinstance(value, dict):
            return f"{_text(path)}: expected an object, got {_kind(value)}"
        if len(value) > self.max_keys:
            return f"{_text(path)}: {len(value)} keys, at most {self.max_keys} expected"
        for key in self.required:
            if key not in value:
                return f"{_text((path, key))}: missing"
        for key, v in value.items():
            shape = self.fields.get(key, self.values)
            if shape is not None:
                p = shape.problem(v, (path, key))
                if p:
                    return p
        return ""


class Scalar(Shape):
    """A string (bounded), a number, a boolean or null: a free-form fact."""

    null = True

    def expected(self) -> str:
        return "a plain value"

    def _problem(self, value, path):
        if isinstance(value, (bool, int, float)):
            return ""
        if isinstance(value, str):
            return Str(4096).problem(value, path)
        return f"{_text(path)}: expected a plain value, got {_kind(value)}"


def _text(path: str | tuple) -> str:
    """A lazy path as text: ((("", "devices"), 3), "tflops") -> 'devices[3].tflops'."""
    keys = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(key)
    for key in reversed(keys):
        path = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
    return path


# Shapes shared by several probes.
COUNT = Int(0, 2**63)
NULL_COUNT = Int(0, 2**63, null=True)
MESSAGES = List(Str(4096), max=1000)
MAX_DEVICES = 64


def document(devices: Shape, figures: Shape, node: Shape | None = None) -> Obj:
    """The probe protocol's envelope around one probe's own shapes."""
    return Obj(required=("probe", "schema", "node", "devices", "figures", "errors"),
               probe=Str(64), schema=Int(1, 1), node=node or Obj(values=Scalar()),
               devices=List(devices, max=MAX_DEVICES), figures=figures, errors=MESSAGES)
