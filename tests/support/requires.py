"""What a test needs of this machine: skip on a developer's machine, fail in CI.

A module of its own (not conftest.py, whose module name the repository's root conftest
also has: `from conftest import ...` finds whichever was imported first)."""

from __future__ import annotations

import os

import pytest


def need(problem: str) -> None:
    """Skip for `problem` on a developer's machine; in CI, which installs it all, fail."""
    __tracebackhide__ = True
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"cannot be built in CI: {problem}")
        pytest.skip(problem)
