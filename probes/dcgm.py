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


def _dicts(value) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def body_of(doc: dict) -> dict:
    """The diagnostic's body: DCGM 4 "DCGM Diagnostic", DCGM 3 "DCGM GPU Diagnostic"."""
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    return body if isinstance(body, dict) else {}


def parse(doc: dict) -> list[dict]:
    """Every test result of a `dcgmi diag -j` document: category, test, entity (GPU, or
    DCGM 4's other entity groups such as CPU), status, warnings and info. The shape is
    DCGM's own schema (NVIDIA/DCGM testing/python3/dcgm_diag_schema.json): DCGM 4 names
    the document "DCGM Diagnostic", a result's entity "entity_group"/"entity_id", and
    gives each test a "test_summary"; DCGM 3 names it "DCGM GPU Diagnostic" and a
    result's GPUs "gpu_ids". A test whose summary says Fail while none of its results
    does still fails, as one result of no entity."""
    out = []
    for category in _dicts(body_of(doc).get("test_categories")):
        for test in _dicts(category.get("tests")):
            mine = []
            for r in _dicts(test.get("results")):
                entity = r.get("entity_id", r.get("gpu_ids", r.get("gpu_id")))
                group = r.get("entity_group")
                mine.append({"category": str(category.get("category", "")),
                             "test": str(test.get("name", "")),
                             "gpu": None if entity is None else str(entity),
                             "entity_group": None if group is None else str(group),
                             "status": str(r.get("status", "")),
                             "warnings": _messages(r.get("warnings") or r.get("errors")),
                             "info": _messages(r.get("info"))})
            summary = test.get("test_summary")
            summary = str(summary.get("status", "")) if isinstance(summary, dict) else ""
            if summary.lower() == "fail" and not any(r["status"].lower() == "fail"
                                                     for r in mine):
                mine.append({"category": str(category.get("category", "")),
                             "test": str(test.get("name", "")), "gpu": None,
                             "entity_group": None, "status": summary,
                             "warnings": ["DCGM's test summary says Fail; no result "
                                          "names an entity"], "info": []})
            out += mine
    return out


def version_of(doc: dict) -> str | None:
    """DCGM 4 writes its version under "metadata"; DCGM 3 in the body."""
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    return str(meta.get("version") or body_of(doc).get("version") or "") or None


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
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        results, errors = parse(doc), []
        figures["version"] = version_of(doc)
        runtime = body_of(doc).get("runtime_error")
        if runtime:  # DCGM could not run (or finish) the diagnostic: its own words
            errors.append(f"dcgmi diag: runtime error: {str(runtime)[:2000]}")
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
