"""The health probe's own readers (probes/hostfacts.py: the kernel log's XIDs and SXids,
EDAC, meminfo, CPUs), loaded from the probes burnin ships, so that node-check reads the
node exactly as a run's health check does. hostfacts imports only the standard library."""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType

from burnin.core.shipped_files import shipped

_NAME = "burnin_nodecheck_hostfacts"
# The checks run in threads at once, and two of them want the module: the second must not
# see it half executed.
_LOADING = threading.Lock()


def hostfacts() -> ModuleType:
    """probes/hostfacts.py as a module (loaded once, whole before anyone sees it)."""
    with _LOADING:
        if _NAME in sys.modules:
            return sys.modules[_NAME]
        spec = importlib.util.spec_from_file_location(_NAME,
                                                      shipped("probes") / "hostfacts.py")
        if spec is None or spec.loader is None:
            raise ImportError("probes/hostfacts.py cannot be loaded")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[_NAME] = module
        return module
