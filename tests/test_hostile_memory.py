"""benchmarks/hostile_output.py runs: a smoke test at 4 nodes and a small output. It asserts
that the benchmark completes and prints its figures, never what the figures are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_hostile_output_benchmark_completes_and_prints_its_figures():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "hostile_output.py"),
                           "--nodes", "4", "--bytes", "100000"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    for case in ("baseline", "numbers", "nested", "arrays"):
        assert any(line.startswith(f"{case}: 4 nodes x ") and "peak RSS" in line
                   for line in lines), done.stdout
    assert lines[-1].startswith("peak RSS / baseline: numbers "), done.stdout
