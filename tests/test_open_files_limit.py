"""The controller raises its open-files limit to the hard one at start, and refuses a run
the hard limit cannot carry before any node is touched (burnin/engine/openfiles.py)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from burnin.engine.openfiles import needed

REPO = Path(__file__).resolve().parent.parent


def burnin_run(tmp_path: Path, soft: int, hard: int, *args: str) -> subprocess.CompletedProcess:
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"version": 1, "cluster": "c",
                               "defaults": {"transport": "local", "gpus": 0,
                                            "workdir": str(tmp_path / "w")},
                               "nodes": [{"name": "n1"}]}))
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "suites"), "--inventory", str(inv),
         "--reports", str(tmp_path / "reports"), "-p", "no:cacheprovider", "-q", "-k",
         "health", *args],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
        capture_output=True, text=True, cwd=tmp_path, timeout=120)


def test_a_fanout_the_hard_limit_cannot_carry_is_refused_before_any_node_is_touched(tmp_path):
    res = burnin_run(tmp_path, 1024, 1024, "--fanout", "5000")
    assert res.returncode == 4, res.stdout + res.stderr
    said = res.stdout + res.stderr
    assert f"--fanout 5000 needs about {needed(5000)} open files" in said, said
    assert "may open at most 1024" in said and "lower --fanout to 192 or less" in said, said
    assert "Traceback" not in said
    assert not (tmp_path / "w").exists(), "a node was touched"


def test_the_soft_limit_is_raised_to_the_hard_one(tmp_path):
    """A soft limit of 300 is short of the default fan-out's needs; the hard one is not."""
    res = burnin_run(tmp_path, 300, 4096, "--collect-only")
    assert res.returncode == 0, res.stdout + res.stderr
    code = ("import resource; from burnin.engine.openfiles import raise_to_hard; "
            "print(repr(raise_to_hard(256)), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                               (300, 4096)), timeout=60)
    assert out.stdout.split() == ["''", "4096"], out.stdout + out.stderr
