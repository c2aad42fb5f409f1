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
CUDA_ENV = "BURNIN_EMULATE_CUDA"  # probes/probelib.py: which NVML devices torch "sees"
SITE_DIR = Path(__file__).resolve().parent / "site"


def write_scenario(path: Path, scenario: dict) -> Path:
    """Check `scenario` (a mistake fails here, in the test, not in a probe's stderr) and
    write it as JSON to `path`."""
    from .scenario import load
    from .state import Emulator
    Emulator(load(scenario))
    path.write_text(json.dumps(scenario, indent=1))
    return path


def visible(scenario: dict, cuda: str = "all") -> str:
    """BURNIN_EMULATE_CUDA for a scenario: the NVML indices torch sees as cuda:0, 1, ...
    'all' is every GPU NVML can name (none when NVML does not start, and not a lost one:
    CUDA cannot use it either); 'none' is no GPU (a driver/CUDA mismatch); any other
    value ('2,0,1', 'mig:3') is taken as it is.

    A GPU with MIG on is no CUDA device itself: CUDA enumerates MIG devices instead, and
    one process sees one MIG device (the MIG user guide says so of CUDA 11 and 12), so
    'all' puts 'mig:<index>' of the first such GPU where that GPU would be, and leaves
    the other MIG GPUs out: 8 GPUs with MIG on are 1 device to torch."""
    from .scenario import at, load
    if cuda == "none":
        return ""
    if cuda != "all":
        return cuda
    s = load(scenario)
    if s.init_error is not None:
        return ""
    seen, mig_seen = [], False
    for i, d in enumerate(s.devices):
        if d.get("lost") is True:
            continue
        if at(d["mig_mode"]["current"], 0):
            if not mig_seen:
                seen.append(f"mig:{i}")
            mig_seen = True
            continue
        seen.append(str(i))
    return ",".join(seen)


def pythonpath_with_site(current: str | None) -> str:
    """PYTHONPATH with SITE_DIR first, keeping the entries already there."""
    return os.pathsep.join([str(SITE_DIR), *filter(None, (current or "").split(os.pathsep))])


def python_wrapper(path: Path, scenario_path: Path, python: str = sys.executable,
                   cuda: str = "all") -> str:
    """Write an executable at `path` that runs `python` with the emulator installed for the
    scenario at `scenario_path`, and torch "seeing" the GPUs `cuda` names (visible()): a
    node's `python:` where no environment reaches the node (SSH test hosts). Returns its
    path as a string."""
    site = shlex.quote(str(SITE_DIR))
    seen = visible(json.loads(Path(scenario_path).read_text()), cuda)
    path.write_text("#!/bin/sh\n"
                    f"PYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                    f"{SCENARIO_ENV}={shlex.quote(str(scenario_path))}\n"
                    f"{CUDA_ENV}={shlex.quote(seen)}\n"
                    f"export PYTHONPATH {SCENARIO_ENV} {CUDA_ENV}\n"
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
