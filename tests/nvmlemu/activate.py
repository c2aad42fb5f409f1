"""Putting the emulator in front of pynvml: for subprocesses (sitecustomize), for SSH test
hosts (a wrapper interpreter), and in-process (a context manager)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCENARIO_ENV = "BURNIN_NVML_SCENARIO"
SITE_DIR = Path(__file__).resolve().parent / "site"


def write_scenario(path: Path, scenario: dict) -> Path:
    """Check `scenario` (a mistake fails here, in the test, not in a probe's stderr) and
    write it as JSON to `path`."""
    from .scenario import load
    from .state import Emulator
    Emulator(load(scenario))
    path.write_text(json.dumps(scenario, indent=1))
    return path


def pythonpath_with_site(current: str | None) -> str:
    """PYTHONPATH with SITE_DIR first, keeping the entries already there."""
    return os.pathsep.join([str(SITE_DIR), *filter(None, (current or "").split(os.pathsep))])


def python_wrapper(path: Path, scenario_path: Path, python: str = sys.executable) -> str:
    """Write an executable at `path` that runs `python` with the emulator installed for the
    scenario at `scenario_path`: a node's `python:` where no environment reaches the node
    (SSH test hosts). Returns its path as a string."""
    site = shlex.quote(str(SITE_DIR))
    path.write_text("#!/bin/sh\n"
                    f"PYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                    f"{SCENARIO_ENV}={shlex.quote(str(scenario_path))}\n"
                    f"export PYTHONPATH {SCENARIO_ENV}\n"
                    f"exec {shlex.quote(python)} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


@contextmanager
def installed(scenario: dict, clock=None) -> Iterator:
    """The real pynvml module, answering from `scenario` until the block ends; pynvml is
    then as it was (no library, nothing cached). Yields the Emulator; its `.pynvml` is the
    module."""
    import time

    from .state import install, uninstall
    emu = install(scenario, clock or time.monotonic)
    try:
        yield emu
    finally:
        uninstall()
