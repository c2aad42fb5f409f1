"""Helpers to run the real suites/ through pytester and read what they reported."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
SUITES = str(REPO / "suites")
# The full suite on CPU-only nodes, in run order (pcie does not apply to them).
CHECKS = ("health", "memory", "sdc", "burn", "storage", "allreduce", "collectives", "train",
          "fabric", "allreduce_internode", "collectives_internode", "train_internode")
# The same on GPU nodes (emulated): pcie and gpupairs apply there; dcgm only where dcgmi
# is installed.
GPU_CHECKS = ("health", "pcie", "gpupairs", "memory", "sdc", "burn", "storage", "allreduce",
              "collectives", "train", "fabric", "allreduce_internode", "collectives_internode",
              "train_internode")
# Tiny settings for the memory check where a test runs the full suite.
TINY_MEMORY = {"host_bytes": 1 << 20, "retention_s": 0.2, "passes": 1}
# And for the train check: the recorded documents' own model (tests/corpus/record.py), so
# that a real node and replayed ones run the same job; nodes sharing this machine's cores
# are no yardstick for one another's speed.
TINY_TRAIN = {"steps": 6, "warmup_steps": 2, "d_model": 32, "layers": 1, "heads": 2,
              "seq_len": 16, "vocab": 64, "batch": 4, "gemm_n": 64, "gemm_s": 0.05, "lr": 0.01,
              "peer_fraction": 0, "straggler_fraction": 0}


# A run of suites/ in a subprocess: without Hypothesis's plugin (the suites use none),
# which imports hypothesis at every session's end, through pytest's assertion rewriting
# (a plugin's whole distribution is rewritten): 1.2 s of CPU a run where Python writes no
# bytecode, as with PYTHONDONTWRITEBYTECODE=1. In-process runs: tests/conftest.py.
NO_HYPOTHESIS = {"PYTEST_ADDOPTS": "-p no:hypothesispytest"}


def run_suite(pytester: pytest.Pytester, inv, *args: str) -> tuple[pytest.RunResult, Path]:
    """Run suites/ against inventory `inv`; return the result and the reports directory."""
    reports = pytester.path / "reports"
    result = pytester.runpytest(SUITES, "--inventory", str(inv), "--reports", str(reports),
                                "-p", "no:cacheprovider", *args)
    return result, reports


def junit_cases(reports: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """{node: {check: (outcome, message)}} from reports/latest/junit.xml."""
    root = ET.parse(reports / "latest" / "junit.xml").getroot()
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for suite in root.iter("testsuite"):
        cases = out.setdefault(suite.get("name"), {})
        for case in suite.iter("testcase"):
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    outcome, message = tag, el.get("message") or ""
            cases[case.get("name")] = (outcome, message)
    return out


def script(path: Path, body: str) -> str:
    """An executable shell script, e.g. a node's `python` that plants a fault below the
    probe (a hang, a crash, a throttle, a corrupting library); returns its path."""
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def trio_inventory(pytester: pytest.Pytester, path: Path, tail: str = "",
                   ledger: str | None = None, init: bool = True) -> Path:
    """n1 and n2, whose probes replay the real ones' recorded documents (tests/support/replay.py),
    and n3, whose python is the test's own `py3` script (healthy, slowed or broken below
    the probe); the ledger in the test's directory, or at `ledger` (a path or URL). `tail`:
    YAML lines appended as they are (indented two spaces, they continue `quarantine:`).
    The ledger is created first (`init`), as an operator's `burnin ledger init` would: a
    run never creates a configured one."""
    from support.replay import replay_python
    replay = replay_python(pytester.path / "replay")
    path.write_text(textwrap.dedent(f"""\
        version: 1
        defaults: {{transport: local, gpus: 0, python: {replay}}}
        nodes:
          - name: n[1-2]
          - name: n3
            python: {pytester.path / 'py3'}
        quarantine:
          ledger: {json.dumps(ledger or str(pytester.path / 'ledger.db'))}
        """) + tail)
    if init:
        from burnin.ledger.api import Ledger
        Ledger(ledger or pytester.path / "ledger.db")
    return path
