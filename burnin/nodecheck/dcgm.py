"""DCGM health (`dcgmi health -c`, the watches' verdict, not a diagnostic) where dcgmi is
installed. Healthy passes; Warning warns; Failure, or dcgmi that cannot answer, fails: a
node whose DCGM cannot say is a node nobody vouched for."""

from __future__ import annotations

import json
import shutil
import subprocess

from burnin.nodecheck.budget import remaining
from burnin.nodecheck.model import CheckResult, fail, warn

CHECK = "dcgm"


def installed(dcgmi: str) -> str | None:
    return shutil.which(dcgmi)


def check(dcgmi: str, deadline: float) -> CheckResult:
    try:
        done = subprocess.run([dcgmi, "health", "-c", "-j"], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, errors="replace",
                              timeout=remaining(deadline), start_new_session=True)
    except subprocess.TimeoutExpired:
        return CheckResult(CHECK, (fail(CHECK, "dcgmi health -c did not answer within the "
                                               "time budget"),), finished=False)
    except OSError as e:
        return CheckResult(CHECK, (fail(CHECK, f"dcgmi cannot be run: {e}"),))
    overall = _overall(done.stdout)
    if done.returncode != 0 or overall is None:
        said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return CheckResult(CHECK, (fail(CHECK, f"dcgmi health -c exited {done.returncode} "
                                               f"without a verdict: {said[0][:200]}"),))
    if overall == "healthy":
        return CheckResult(CHECK)
    text = f"dcgmi health -c: overall health {overall}{_details(done.stdout)}"
    return CheckResult(CHECK, ((warn if overall == "warning" else fail)(CHECK, text),))


def _overall(stdout: str) -> str | None:
    """The 'Overall Health' of dcgmi's JSON (or its table), lower case."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        doc = None
    found = _find(doc) if doc is not None else None
    if found is None:
        for line in stdout.splitlines():
            if "Overall Health" in line:
                found = line.split("Overall Health", 1)[1].strip(" |:\t")
                break
    return found.strip().lower() or None if isinstance(found, str) else None


def _find(node, depth: int = 0):
    if depth > 8:
        return None
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str) and k.lower().replace("_", " ") == "overall health":
                return v.get("value") if isinstance(v, dict) else v
            hit = _find(v, depth + 1)
            if hit is not None:
                return hit
    elif isinstance(node, list):
        for v in node[:64]:
            hit = _find(v, depth + 1)
            if hit is not None:
                return hit
    return None


def _details(stdout: str) -> str:
    lines = [ln.strip(" |") for ln in stdout.splitlines()
             if any(w in ln for w in ("Failure", "Warning", "Error")) and "Overall" not in ln]
    return f" ({'; '.join(lines[:3])[:200]})" if lines else ""
