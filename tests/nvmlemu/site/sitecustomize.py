"""Installs the NVML emulator (tests/nvmlemu) into the real pynvml at interpreter start,
when $BURNIN_NVML_SCENARIO names a scenario file and this folder is on PYTHONPATH.

Test code only. Cheap: pynvml and the emulator, never torch. The emulator's package is
imported from beside this folder without leaving tests/ on sys.path, so that the probe
sees the module search path it would see on a node.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _install() -> None:
    path = os.environ.get("BURNIN_NVML_SCENARIO")
    if not path:
        return
    tests = os.path.dirname(os.path.dirname(_HERE))
    sys.path.insert(0, tests)
    try:
        import nvmlemu
    finally:
        sys.path.remove(tests)
    nvmlemu.install(nvmlemu.load(path))


def _chain() -> None:
    """Run the sitecustomize this one shadows, if the interpreter has one. The test sites
    (the NVML emulator's, the replay's) may shadow each other in either order: each runs
    once, whichever is found first."""
    ran = sys.__dict__.setdefault("_burnin_test_sites", set())
    ran.add(_HERE)
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) not in ran]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None and spec.origin:
        ran.add(os.path.dirname(os.path.abspath(spec.origin)))
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_chain()
_install()
