"""What a test needs of this machine: skip on a developer's machine, fail in CI.

A module of its own (not conftest.py, whose module name the repository's root conftest
also has: `from conftest import ...` finds whichever was imported first)."""

from __future__ import annotations

import os
import signal

import pytest


def need(problem: str) -> None:
    """Skip for `problem` on a developer's machine; in CI, which installs it all, fail."""
    __tracebackhide__ = True
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"cannot be built in CI: {problem}")
        pytest.skip(problem)


def sigint_ignored() -> str:
    """Why a Ctrl-C test cannot work here, or '': a process that ignores SIGINT hands that
    to every process it starts (a shell's background job `cmd &` starts so), and a run
    started from it then never sees the Ctrl-C the test sends."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return ("SIGINT is ignored in this process (started as a shell's background job?): "
                "a run it starts cannot be stopped by Ctrl-C; run the tests in the "
                "foreground")
    return ""
