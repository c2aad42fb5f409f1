"""The emulator's state: devices and their handles, the clock, init refcount, event sets;
and installing the emulated library into the real pynvml module."""

from __future__ import annotations

import ctypes
import sys
import threading
import time
import traceback

import pynvml

from . import calls, events, fabric, fields, topology  # noqa: F401  (each declares its symbols)
from . import scenario as sc
from .declarations import SYMBOLS, Symbol, prototype
from .drivers import exports


class Device:
    """One emulated GPU: its scenario entry, read at the emulator's current second, and the
    memory block whose address is its nvmlDevice_t handle."""

    def __init__(self, emu: Emulator, index: int, spec: dict):
        self.emu, self.index, self.spec = emu, index, spec
        self._block = ctypes.create_string_buffer(16)  # lives as long as the emulator
        self.address = ctypes.addressof(self._block)
        self.handle = ctypes.cast(self.address, pynvml.c_nvmlDevice_t)

    def get(self, *path):
        """The scenario value at `path` now (a list in the scenario is a time series)."""
        value = self.spec
        for key in path:
            value = value[key]
        return sc.at(value, self.emu.elapsed())

    def get_list(self, *path) -> list:
        value = self.spec
        for key in path:
            value = value[key]
        return sc.at_list(value, self.emu.elapsed())

    def refusal(self, names: tuple[str, ...]) -> int | None:
        """The code a call reading `names` answers before reading anything, if any."""
        if self.get("lost"):
            return sc.GPU_IS_LOST
        for name in names:
            if name in self.spec["errors"]:
                return sc.code(self.spec["errors"][name], f"devices[{self.index}].errors")
        if any(name in self.spec["unsupported"] for name in names):
            return sc.NOT_SUPPORTED
        return None


class Library:
    """What pynvml holds as nvmlLib: one attribute per exported symbol, nothing else, so that
    pynvml's getattr finds exactly the symbols a real libnvidia-ml.so.1 would export."""


class Emulator:
    """Answers NVML calls from a scenario. `clock` is for tests that step time by hand.
    pynvml calls from several threads (the burn probe samples while it waits for XIDs):
    what changes after construction (init count, event sets) changes under `lock`."""

    def __init__(self, scenario: sc.Scenario, clock=time.monotonic):
        self.scenario, self.clock = scenario, clock
        self.pynvml = pynvml
        self.started = clock()
        self.refcount = 0
        self.lock = threading.Lock()
        self.devices = [Device(self, i, spec) for i, spec in enumerate(scenario.devices)]
        self._by_address = {d.address: d for d in self.devices}
        self.event_sets: dict[int, object] = {}
        self.internal_errors: list[str] = []
        self._strings: dict[int, ctypes.Array] = {}
        self._check_fault_names()
        self.lib = Library()
        # Only what the scenario's driver branch exports: pynvml finds no attribute for the
        # rest and raises NVMLError_FunctionNotFound, as it does with an older real library.
        for sym in SYMBOLS.values():
            if exports(sym.name, scenario.branch):
                setattr(self.lib, sym.name, prototype(sym)(self._callback(sym)))

    def _check_fault_names(self) -> None:
        known = {s.name for s in SYMBOLS.values()} | {r for s in SYMBOLS.values()
                                                      for r in s.readings}
        for i, spec in enumerate(self.scenario.devices):
            for name in [*spec["unsupported"], *spec["errors"]]:
                if name not in known:
                    raise sc.ScenarioError(
                        f"devices[{i}]: {name!r} names neither an exported symbol nor a "
                        f"reading; readings are {', '.join(sorted(known - set(SYMBOLS)))}")
            for name in spec["field_values"]:
                if not (str(name).isdigit() or isinstance(getattr(pynvml, str(name), None), int)):
                    raise sc.ScenarioError(f"devices[{i}].field_values: {name!r} is neither a "
                                           "field id nor an NVML_FI_ name")

    def elapsed(self) -> float:
        return self.clock() - self.started

    def device_at(self, handle) -> Device | None:
        address = ctypes.cast(handle, ctypes.c_void_p).value if handle else None
        return self._by_address.get(address)

    def _callback(self, sym: Symbol):
        failed = sc.UNKNOWN if sym.restype is ctypes.c_int else None

        def call(*args):
            try:
                return self.dispatch(sym, args)
            except Exception:
                # ctypes would print this and return 0, NVML_SUCCESS: an emulator bug must
                # never read as a good answer.
                self.internal_errors.append(traceback.format_exc())
                print(f"nvmlemu: {sym.name} failed inside the emulator:\n"
                      f"{self.internal_errors[-1]}", file=sys.stderr)
                return failed
        return call

    def dispatch(self, sym: Symbol, args: tuple):
        if sym.needs_init and self.refcount == 0:
            return sc.UNINITIALIZED
        if not sym.takes_device:
            return sym.impl(self, *args)
        dev = self.device_at(args[0])
        if dev is None:
            return sc.INVALID_ARGUMENT
        refused = dev.refusal((sym.name, *sym.readings))
        if refused is not None:
            return refused
        return sym.impl(self, dev, *args[1:])

    def init(self) -> int:
        if self.scenario.init_error:
            return self.scenario.init_error
        with self.lock:
            self.refcount += 1
        return sc.SUCCESS

    def shutdown(self) -> int:
        with self.lock:
            self.refcount -= 1
        return sc.SUCCESS

    def error_string(self, code: int) -> int:
        """The address of a NUL-terminated string that lives as long as the emulator."""
        if code not in self._strings:
            name = {v: k for k, v in sc.CODES.items()}.get(code)
            text = ERROR_STRINGS.get(code) or (name.replace("_", " ").title() if name
                                                else "Unknown Error")
            self._strings[code] = ctypes.create_string_buffer(text.encode())
        return ctypes.addressof(self._strings[code])


# What nvmlErrorString answers where pynvml's own table has no entry (pynvml asks the
# library only for those): close to the driver's wording, not copied from it.
ERROR_STRINGS = {
    0: "Success", 19: "In use by another client", 21: "No data",
    22: "vGPU ECC not supported", 23: "Insufficient resources",
    24: "Frequency not supported", 25: "Argument version mismatch", 26: "Deprecated",
    27: "Not ready", 28: "GPU not found", 29: "Invalid state",
}


def install(scenario: sc.Scenario | dict, clock=time.monotonic) -> Emulator:
    """Make the real pynvml module call the emulator instead of libnvidia-ml.so.1, from its
    next nvmlInit() on. A second install replaces the first; uninstall() undoes both."""
    if isinstance(scenario, dict):
        scenario = sc.load(scenario)
    emu = Emulator(scenario, clock)
    with pynvml.libLoadLock:
        saved = getattr(pynvml, "_nvmlemu_saved", None)
        if saved is None:
            pynvml._nvmlemu_saved = (pynvml.nvmlLib, pynvml._nvmlLib_refcount,
                                     dict(pynvml.NVMLError._errcode_to_string))
        pynvml.nvmlLib = emu.lib
        pynvml._nvmlLib_refcount = 0
        # pynvml caches function pointers by name: a previous library's must not answer.
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml._nvmlemu = emu
    return emu


def uninstall() -> None:
    """Put pynvml back as it was before install(): no library loaded, nothing cached."""
    with pynvml.libLoadLock:
        saved = getattr(pynvml, "_nvmlemu_saved", None)
        if saved is None:
            return
        pynvml.nvmlLib, pynvml._nvmlLib_refcount, strings = saved
        pynvml.NVMLError._errcode_to_string.clear()
        pynvml.NVMLError._errcode_to_string.update(strings)
        pynvml._nvmlGetFunctionPointer_cache.clear()
        del pynvml._nvmlemu_saved, pynvml._nvmlemu
