#!/usr/bin/env python3
"""burnin dcgm probe: NVIDIA DCGM's own diagnostic, where DCGM is installed.

Runs ON a node. Runs `dcgmi diag -r <level> -j` and reports every DCGM test's result per
GPU as DCGM gave it (status, DCGM's own messages and error ids). A node without `dcgmi`
(the `dcgmi` setting: a name looked up on PATH, or a path) reports that DCGM does not
apply, and runs nothing. Standard library only.

    echo '{"settings": {"level": 1}}' | python3 probes/dcgm.py

Settings (optional): dcgmi ("dcgmi"), level (1), timeout_s (3600).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import probelib

PROBE = "dcgm"
MAX_MESSAGES = 50


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


def _messages(entries) -> list[str]:
    """DCGM's warnings or info: strings, or objects with 'warning'/'message'/'msg' and
    perhaps an 'error_id' (their shape differs between DCGM releases)."""
    if entries is None:
        return []
    if isinstance(entries, (str, dict)):
        entries = [entries]
    out = []
    for e in entries[:MAX_MESSAGES]:
        if isinstance(e, dict):
            text = e.get("warning") or e.get("message") or e.get("msg") or json.dumps(e)
            code = e.get("error_id")
            out.append(f"{text} (DCGM error id {code})" if code is not None else str(text))
        else:
            out.append(str(e))
    return out


def parse(doc: dict) -> list[dict]:
    """Every test result of a `dcgmi diag -j` document: category, test, GPU, status,
    warnings and info. DCGM 3 names the document "DCGM GPU Diagnostic" and a result's
    GPUs "gpu_ids"; DCGM 4 names it "DCGM Diagnostic" and a result's GPU "entity_id"."""
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic") or {}
    out = []
    for category in body.get("test_categories") or []:
        for test in category.get("tests") or []:
            for r in test.get("results") or []:
                gpu = r.get("entity_id", r.get("gpu_ids", r.get("gpu_id")))
                out.append({"category": str(category.get("category", "")),
                            "test": str(test.get("name", "")),
                            "gpu": None if gpu is None else str(gpu),
                            "status": str(r.get("status", "")),
                            "warnings": _messages(r.get("warnings") or r.get("errors")),
                            "info": _messages(r.get("info"))})
    return out


def main() -> int:
    payload = probelib.start(__doc__, PROBE)
    if payload is None:
        return 0
    settings = payload.get("settings", {})
    node = {"hostname": os.uname()[1]}
    dcgmi = shutil.which(str(settings.get("dcgmi") or "dcgmi"))
    if dcgmi is None:
        why = f"DCGM is not installed ({settings.get('dcgmi') or 'dcgmi'} not found)"
        log(why)
        probelib.emit(PROBE, node, [], {"applies": False, "why": why}, [])
        return 0
    level = int(settings.get("level", 1))
    argv = [dcgmi, "diag", "-r", str(level), "-j"]
    log(f"running {' '.join(argv)}")
    started = time.time()
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=float(settings.get("timeout_s", 3600)),
                              preexec_fn=probelib.die_with_parent)
    except (OSError, subprocess.TimeoutExpired) as e:
        probelib.emit(PROBE, node, [], {"applies": True, "level": level},
                      [f"{' '.join(argv)}: {e}"])
        return 0
    figures = {"applies": True, "level": level, "exit_status": done.returncode,
               "elapsed_s": round(time.time() - started, 3)}
    text = done.stdout
    try:
        doc = json.loads(text[text.find("{"):text.rfind("}") + 1])
        results, errors = parse(doc), []
        figures["version"] = str((doc.get("DCGM Diagnostic") or doc.get(
            "DCGM GPU Diagnostic") or {}).get("version", "")) or None
    except ValueError:
        results = []
        errors = [f"dcgmi diag exited {done.returncode} without a JSON document: "
                  f"{(done.stderr or text).strip()[-500:]}"]
    if not results and not errors:
        errors.append(f"dcgmi diag exited {done.returncode} and reported no test")
    figures["results"] = results
    probelib.emit(PROBE, node, [], figures, errors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
