"""How a symbol of the emulated libnvidia-ml.so.1 is declared: its name, its C prototype
(argument types from nvml.h, in ctypes, with pynvml's own structure classes), the scenario
readings it answers from, and the Python function that answers it.

calls.py, fields.py and events.py declare the symbols with @export; SYMBOLS holds them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from ctypes import POINTER
from dataclasses import dataclass
from functools import cache

import pynvml as nv

from .scenario import INSUFFICIENT_SIZE, INVALID_ARGUMENT, NOT_SUPPORTED, SUCCESS

DEVICE = nv.c_nvmlDevice_t
EVENT_SET = nv.c_nvmlEventSet_t
P = POINTER


@dataclass(frozen=True)
class Symbol:
    name: str
    argtypes: tuple
    impl: Callable[..., object]
    readings: tuple[str, ...]   # scenario keys it reads: "unsupported"/"errors" by these names
    restype: type
    needs_init: bool

    @property
    def takes_device(self) -> bool:
        """The first argument is an nvmlDevice_t, resolved before impl is called."""
        return self.argtypes[:1] == (DEVICE,)


SYMBOLS: dict[str, Symbol] = {}


def export(name: str, *argtypes, reads: str | tuple[str, ...] = (), restype=ctypes.c_int,
           needs_init: bool = True):
    """Declare `name` with nvml.h's prototype; the decorated function answers it, given
    (emulator, device, *other arguments) for device calls, (emulator, *arguments) else."""
    def register(impl):
        if name in SYMBOLS:
            raise ValueError(f"{name} is declared twice")
        readings = (reads,) if isinstance(reads, str) else tuple(reads)
        SYMBOLS[name] = Symbol(name, tuple(argtypes), impl, readings, restype, needs_init)
        return impl
    return register


@cache
def prototype(sym: Symbol):
    """A ctypes function type for `sym`, like CFUNCTYPE(restype, *argtypes), except that it
    counts arguments exactly: CFUNCTYPE's cdecl flag lets a caller pass extra arguments
    (as to a C varargs function); no NVML function is variadic. On Linux the flag changes
    nothing else (there is one calling convention)."""
    return type(f"{sym.name}_t", (ctypes._CFuncPtr,), {
        "_argtypes_": sym.argtypes, "_restype_": sym.restype, "_flags_": 0})


def put(ptr, value) -> int:
    """Write one value through an output pointer; None in the scenario means unsupported."""
    if not ptr:
        return INVALID_ARGUMENT
    if value is None:
        return NOT_SUPPORTED
    ptr[0] = int(value)
    return SUCCESS


def put_text(buf, length: int, text: str | None) -> int:
    """Write a NUL-terminated string into a caller's buffer of `length` bytes."""
    if not buf:
        return INVALID_ARGUMENT
    if text is None:
        return NOT_SUPPORTED
    data = text.encode() + b"\0"
    if len(data) > length:
        return INSUFFICIENT_SIZE
    ctypes.memmove(buf, data, len(data))
    return SUCCESS


def struct_version(struct: type, version: int) -> int:
    """NVML_STRUCT_VERSION(data, ver) of nvml.h: sizeof(struct) | ver << 24."""
    return ctypes.sizeof(struct) | version << 24


@cache
def array_of(item: type) -> type:
    """A parameter type for `T *values` where pynvml passes byref(array of T), which a
    POINTER(T) argument refuses although C receives the same address: it takes exactly
    that (or a pointer to, or array of, T) and refuses the rest."""

    class ArrayOf(ctypes.c_void_p):
        @classmethod
        def from_param(cls, obj):
            byref_target = getattr(obj, "_obj", None)  # byref(x) keeps x in _obj
            if (obj is None or isinstance(obj, (cls, P(item)))
                    or (isinstance(obj, ctypes.Array) and obj._type_ is item)
                    or isinstance(byref_target, item)
                    or (isinstance(byref_target, ctypes.Array)
                        and byref_target._type_ is item)):
                return obj
            raise TypeError(f"expected a pointer to {item.__name__}, got {type(obj).__name__}")

    ArrayOf.__name__ = f"ArrayOf_{item.__name__}"
    return ArrayOf


# nvmlFieldValue_t *values
FieldValueArray = array_of(nv.c_nvmlFieldValue_t)
