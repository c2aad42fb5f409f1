"""The health probe's own readers, loaded from the probes burnin ships, so that node-check
reads the node exactly as a run's health check does: probes/hostfacts.py (the kernel log's
XIDs and SXids, EDAC, meminfo, CPUs) and probes/gpufabric.py (a GPU's NVLink fabric
registration, the IMEX channel devices). Both import only the standard library."""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType

from burnin.core.shipped_files import shipped

_PREFIX = "burnin_nodecheck_"
_NAME = f"{_PREFIX}hostfacts"
# The checks run in threads at once, and two of them want the module: the second must not
# see it half executed.
_LOADING = threading.Lock()


def _probe(name: str) -> ModuleType:
    """probes/`name`.py as a module (loaded once, whole before anyone sees it)."""
    key = f"{_PREFIX}{name}"
    with _LOADING:
        if key in sys.modules:
            return sys.modules[key]
        spec = importlib.util.spec_from_file_location(key, shipped("probes") / f"{name}.py")
        if spec is None or spec.loader is None:
            raise ImportError(f"probes/{name}.py cannot be loaded")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[key] = module
        return module


def hostfacts() -> ModuleType:
    """probes/hostfacts.py as a module."""
    return _probe("hostfacts")


def gpufabric() -> ModuleType:
    """probes/gpufabric.py as a module."""
    return _probe("gpufabric")
