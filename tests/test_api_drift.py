"""API drift: every attribute the probes use on pynvml and on torch (torch.cuda,
torch.distributed, ...) exists in the installed nvidia-ml-py and torch, so an upgrade that
renames one fails here rather than on a fleet; and every pynvml function the probes call
reaches only C symbols the NVML emulator declares, so the emulator cannot lag behind them.

The probes are read with ast, not imported. A module is followed however it is bound:
`import pynvml as nv`, `import torch.distributed as dist`, `self.nv = pynvml`,
`nv = self.nv`, or passed as an argument to a function or class of the probes
(`Nvml(pynvml)`, `GpuTelemetry(pynvml, ...)`, `_reasons_calls(nv)`).

A pynvml function that pynvml says CUDA 14.0 removes is reached only through
getattr(pynvml, name, None) with a newer call beside it (probelib.nvml_first), so that
neither a newer nvidia-ml-py nor a newer driver turns the reading into an error.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import nvmlemu
import pytest

REPO = Path(__file__).resolve().parent.parent
PROBES = sorted((REPO / "probes").glob("*.py"))
ROOTS = ("pynvml", "torch")


def _key(node: ast.AST) -> str | None:
    """'a.b.c' for a chain of names and attributes, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _key(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _is_module(path: str) -> bool:
    try:
        return importlib.util.find_spec(path) is not None
    except (ImportError, ValueError):
        return False


class ProbeModules:
    """What the probes bind to modules under ROOTS, and the attributes they use on them."""

    def __init__(self, files: list[Path]):
        self.trees = {f.name: ast.parse(f.read_text(), str(f)) for f in files}
        self.aliases: dict[str, dict[str, str]] = {name: {} for name in self.trees}
        self._find_aliases()

    def resolve(self, file: str, key: str | None) -> str | None:
        """The module path `key` stands for in `file` ('nv' -> 'pynvml'), or None."""
        if key is None:
            return None
        parts = key.split(".")
        for i in range(len(parts), 0, -1):
            bound = self.aliases[file].get(".".join(parts[:i]))
            if bound:
                return ".".join([bound, *parts[i:]])
        return None

    def _bind(self, file: str, key: str | None, module: str | None) -> bool:
        """Bind `key` to `module` in `file`, if `module` is a module (a function passed
        along is not) and `key` is not bound yet (so that the search ends)."""
        if not key or not module or key in self.aliases[file] or not _is_module(module):
            return False
        self.aliases[file][key] = module
        return True

    def _callables(self) -> dict[str, list[tuple[str, list[str]]]]:
        """{function or class name: [(file, parameter names passed positionally)]}."""
        out: dict[str, list[tuple[str, list[str]]]] = {}
        for file, tree in self.trees.items():
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef):
                    params = [a.arg for a in node.args.posonlyargs + node.args.args]
                    out.setdefault(node.name, []).append((file, params))
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                            params = [a.arg for a in item.args.args][1:]  # without self
                            out.setdefault(node.name, []).append((file, params))
        return out

    def _find_aliases(self) -> None:
        callables = self._callables()
        changed = True
        while changed:
            changed = False
            for file, tree in self.trees.items():
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        for a in node.names:
                            if a.name.split(".")[0] in ROOTS:
                                changed |= self._bind(file, a.asname or a.name.split(".")[0],
                                                      a.name if a.asname else a.name.split(".")[0])
                    elif isinstance(node, ast.ImportFrom) and node.module \
                            and node.module.split(".")[0] in ROOTS:
                        for a in node.names:
                            changed |= self._bind(file, a.asname or a.name,
                                                  f"{node.module}.{a.name}")
                    elif isinstance(node, ast.Assign):
                        module = self.resolve(file, _key(node.value))
                        for target in node.targets:
                            changed |= self._bind(file, _key(target), module)
                    elif isinstance(node, ast.Call):
                        changed |= self._bind_parameters(file, node, callables)

    def _bind_parameters(self, file: str, call: ast.Call, callables) -> bool:
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(
            call.func, "id", None)
        changed = False
        for i, arg in enumerate(call.args):
            module = self.resolve(file, _key(arg))
            if module is None:
                continue
            for where, params in callables.get(name, []):
                offset = 1 if params[:1] == ["self"] else 0
                if i + offset < len(params):
                    changed |= self._bind(where, params[i + offset], module)
        return changed

    def uses(self, optional: bool = False) -> dict[tuple[str, str], set[str]]:
        """{(module path, attribute): {'file:line', ...}}. getattr(module, "name", default)
        is optional (the default says the probe copes without it): listed only if asked."""
        out: dict[tuple[str, str], set[str]] = {}
        for file, tree in self.trees.items():
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute):
                    module = self.resolve(file, _key(node.value))
                    if module:
                        out.setdefault((module, node.attr), set()).add(f"{file}:{node.lineno}")
                elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr"
                      and len(node.args) == (3 if optional else 2)
                      and isinstance(node.args[1], ast.Constant)):
                    module = self.resolve(file, _key(node.args[0]))
                    if module:
                        out.setdefault((module, node.args[1].value), set()).add(
                            f"{file}:{node.lineno}")
        return out


def lookup(path: str):
    """The object at a dotted path, importing the longest module prefix first."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


READER = ProbeModules(PROBES)
USES, OPTIONAL = READER.uses(), READER.uses(optional=True)


def test_the_reader_follows_every_binding_the_probes_use_today():
    """If the reader lost track of a binding, the tests below would pass on nothing."""
    seen = {f"{module}.{attr}" for module, attr in USES}
    for expected in ("pynvml.nvmlInit",                                 # import pynvml
                     "pynvml.nvmlDeviceGetRemappedRows",                # nv = self.nv (health)
                     "pynvml.nvmlDeviceGetHandleByUUID",                # GpuTelemetry(pynvml)
                     "pynvml.nvmlDeviceGetNvLinkErrorCounter",          # nv = self.nv (telemetry)
                     "pynvml.NVML_TEMPERATURE_GPU",                     # _temperature_calls(nv)
                     "torch.cuda.get_device_properties", "torch.cuda.synchronize",
                     "torch.distributed.all_reduce", "torch.distributed.ReduceOp.MAX"):
        assert expected in seen, f"{expected} not found; the reader saw {sorted(seen)}"


@pytest.mark.parametrize("module,attr", sorted(USES), ids=[f"{m}.{a}" for m, a in sorted(USES)])
def test_what_the_probes_use_exists(module, attr):
    where = ", ".join(sorted(USES[module, attr]))
    assert hasattr(lookup(module), attr), f"{module}.{attr} (used at {where}) does not exist"


def _pynvml_symbols() -> dict[str, set[str]]:
    """{pynvml function or class: every C symbol it reaches through its own calls}."""
    import pynvml
    tree = ast.parse(Path(pynvml.__file__).read_text())
    direct: dict[str, set[str]] = {}
    calls: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            direct[node.name], calls[node.name] = set(), set()
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name):
                    if inner.func.id == "_nvmlGetFunctionPointer" and isinstance(
                            inner.args[0], ast.Constant):
                        direct[node.name].add(inner.args[0].value)
                    else:
                        calls[node.name].add(inner.func.id)
    reached: dict[str, set[str]] = {}
    for name in direct:
        todo, seen, symbols = [name], set(), set()
        while todo:
            fn = todo.pop()
            if fn in seen or fn not in direct:
                continue
            seen.add(fn)
            symbols |= direct[fn]
            todo += calls[fn]
        reached[name] = symbols
    return reached


SYMBOLS_OF = _pynvml_symbols()
CALLED = sorted(a for m, a in [*USES, *OPTIONAL] if m == "pynvml" and SYMBOLS_OF.get(a))
# What the probes are about to call (pairing by UUID or bus id, NVLink through field values,
# configuration drift): the emulator must already answer them.
UPCOMING = ["nvmlDeviceGetHandleByUUID", "nvmlDeviceGetHandleByPciBusId",
            "nvmlDeviceGetFieldValues", "nvmlDeviceGetNvLinkState",
            "nvmlDeviceGetPersistenceMode", "nvmlDeviceGetMigMode", "nvmlDeviceGetComputeMode",
            "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetPowerManagementLimit",
            "nvmlDeviceGetPowerManagementDefaultLimit", "nvmlDeviceGetApplicationsClock",
            "nvmlDeviceGetDefaultApplicationsClock", "nvmlDeviceGetClock",
            "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetVbiosVersion",
            "nvmlDeviceGetInforomImageVersion", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetSerial",
            "nvmlDeviceGetMinorNumber", "nvmlDeviceGetIndex", "nvmlDeviceGetMemoryErrorCounter",
            "nvmlDeviceGetTemperatureV", "nvmlSystemGetCudaDriverVersion_v2"]


def test_the_probes_call_pynvml_functions_that_reach_c():
    assert len(CALLED) >= 20 and "nvmlEventSetWait" in CALLED and "NVMLError" in CALLED
    for name in ("nvmlDeviceGetCurrentClocksEventReasons",  # getattr(nv, ..., None)
                 "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetTemperatureV"):
        assert name in CALLED
    # raising NVMLError reaches nvmlErrorString too: str(error) asks the library for its text
    assert SYMBOLS_OF["nvmlEventSetWait"] == {"nvmlEventSetWait_v2", "nvmlErrorString"}
    assert SYMBOLS_OF["nvmlInit"] == {"nvmlInitWithFlags", "nvmlErrorString"}


@pytest.mark.parametrize("function", sorted(set(CALLED) | set(UPCOMING)))
def test_the_emulator_declares_every_symbol_a_probe_call_reaches(function):
    missing = SYMBOLS_OF[function] - set(nvmlemu.SYMBOLS)
    assert not missing, f"pynvml.{function} calls {sorted(missing)}, which tests/nvmlemu " \
                        "does not declare"


def test_the_emulator_declares_only_symbols_pynvml_asks_for():
    asked = set().union(*SYMBOLS_OF.values())
    assert set(nvmlemu.SYMBOLS) <= asked, sorted(set(nvmlemu.SYMBOLS) - asked)


def _removed_in_cuda14() -> set[str]:
    """The pynvml functions whose source says 'will be removed in CUDA 14.0'."""
    import re

    import pynvml
    source = Path(pynvml.__file__).read_text()
    return set(re.findall(r"#[^\n]*will be removed in CUDA 14[^\n]*\n\s*def (\w+)\(", source))


def test_what_cuda_14_removes_is_reached_only_where_a_newer_call_stands_beside_it():
    removed = _removed_in_cuda14()
    assert {"nvmlDeviceGetTemperature", "nvmlDeviceGetApplicationsClock"} <= removed
    direct = {a: USES[m, a] for m, a in USES if m == "pynvml" and a in removed}
    assert not direct, f"call these through getattr(nv, name, None) and nvml_first: {direct}"
    optional = {a for m, a in OPTIONAL if m == "pynvml" and a in removed}
    # nvmlDeviceGetGpuFabricInfo: R535's fabric call, behind nvmlDeviceGetGpuFabricInfoV
    # (probes/gpufabric.py).
    assert optional == {"nvmlDeviceGetTemperature", "nvmlDeviceGetApplicationsClock",
                        "nvmlDeviceGetDefaultApplicationsClock",
                        "nvmlDeviceGetCurrentClocksThrottleReasons",
                        "nvmlDeviceGetGpuFabricInfo"}
