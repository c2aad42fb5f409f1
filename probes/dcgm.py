#!/usr/bin/env python3
"""burnin dcgm probe: NVIDIA DCGM's own diagnostic, where DCGM is installed.

Runs ON a node. Runs `dcgmi diag -r <level> -j` and reports every DCGM test's result per
entity as dcgmi printed it: its status, and each warning's text, error id, category and
severity (dcgm_errors.h's numbers), with dcgmi's exit status and DCGM's version. It
decides nothing: what a "Fail" of DCGM_ERROR_MONITOR severity means is the controller's
call. A node without `dcgmi` (the `dcgmi` setting: a name looked up on PATH, or a path)
reports that DCGM does not apply, and runs nothing. Standard library only.

dcgmi stops its diagnostic (nvvs, run by nv-hostengine, not by dcgmi) only when it is
asked to by SIGINT, SIGTERM, SIGHUP or SIGQUIT; killed, it leaves nvvs running on the
GPUs. So dcgmi gets SIGTERM, and time to stop, before the probe's own deadline, which
ends ahead of the controller's timeout for the probe (`timeout_s`); and SIGTERM too when
the probe is stopped or dies.

    echo '{"settings": {"level": 1}}' | python3 probes/dcgm.py

Settings (optional): dcgmi ("dcgmi"), level (1), timeout_s (3600: the controller's
timeout for this probe; dcgmi gets that less a quarter, at most a minute).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import probelib

PROBE = "dcgm"
MAX_MESSAGES = 50
MAX_TEXT = 2000
# After SIGTERM, dcgmi asks nv-hostengine to stop nvvs and waits up to 25 s for it
# (Diag::ExecuteDiagOnServer, DCGM 4.6): its grace must cover that.
STOP_GRACE_S = 30.0
# What the probe keeps of the controller's timeout for itself: dcgmi's grace, then the
# time to report. A quarter of short timeouts (tests, by hand), at most a minute.
RESERVE_S = 60.0
RESERVE_FRACTION = 0.25


def log(msg: str) -> None:
    probelib.log(PROBE, msg)


def deadlines(timeout_s: float) -> tuple[float, float]:
    """(how long dcgmi may run, how long it then has to stop after SIGTERM) within the
    controller's timeout for this probe: the controller kills the probe's whole process
    group with SIGKILL, dcgmi included, so the probe must be done well before it."""
    reserve = min(RESERVE_S, RESERVE_FRACTION * timeout_s)
    return timeout_s - reserve, min(STOP_GRACE_S, reserve / 2)


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _warnings(entries) -> list[dict]:
    """DCGM's warnings, as {message, error_id, category, severity}: objects with
    "warning" (DCGM 3 and 4), or "warnings" (DCGM 3's Deployment tests write the text
    under that key), and their numbers; a bare string (older or foreign documents) has
    no numbers, so no severity."""
    if entries is None:
        return []
    if isinstance(entries, (str, dict)):
        entries = [entries]
    if not isinstance(entries, list):
        return [{"message": str(entries)[:MAX_TEXT], "error_id": None, "category": None,
                 "severity": None}]
    out = []
    for e in entries[:MAX_MESSAGES]:
        if isinstance(e, dict):
            text = next((e[k] for k in ("warning", "warnings", "message", "msg")
                         if isinstance(e.get(k), str)), None)
            out.append({"message": (text if text is not None else json.dumps(e))[:MAX_TEXT],
                        "error_id": _int(e.get("error_id")),
                        "category": _int(e.get("error_category")),
                        "severity": _int(e.get("error_severity"))})
        else:
            out.append({"message": str(e)[:MAX_TEXT], "error_id": None, "category": None,
                        "severity": None})
    return out


def _infos(entries) -> list[str]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        entries = [entries]
    return [str(e)[:MAX_TEXT] for e in entries[:MAX_MESSAGES]]


def _dicts(value) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def body_of(doc: dict) -> dict:
    """The diagnostic's body: DCGM 4 "DCGM Diagnostic", DCGM 3 "DCGM GPU Diagnostic"."""
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    return body if isinstance(body, dict) else {}


def _failing(status: str) -> bool:
    return status.strip().lower() not in ("pass", "skip", "not run")


def parse(doc: dict) -> list[dict]:
    """Every test result of a `dcgmi diag -j` document: category, test, entity (GPU, or
    DCGM 4's other entity groups such as CPU), status, warnings and info. DCGM 4 names the
    document "DCGM Diagnostic", a result's entity "entity_group"/"entity_id", and gives
    each test a "test_summary"; DCGM 3 names it "DCGM GPU Diagnostic" and a result's GPU
    "gpu_id" (3.1 wrote "gpu_ids"). A test summary that does not pass adds one result of
    no entity: with the summary's warnings when no result of the test failed, else with
    those no result carries (DCGM 4.6 repeats every error of the test in its summary;
    4.2, only those of no entity), so an error of no entity is never lost."""
    out = []
    for category in _dicts(body_of(doc).get("test_categories")):
        for test in _dicts(category.get("tests")):
            where = {"category": str(category.get("category", "")),
                     "test": str(test.get("name", ""))}
            mine = []
            for r in _dicts(test.get("results")):
                entity = r.get("entity_id", r.get("gpu_id", r.get("gpu_ids")))
                group = r.get("entity_group")
                mine.append({**where, "gpu": None if entity is None else str(entity),
                             "entity_group": None if group is None else str(group),
                             "status": str(r.get("status", "")),
                             "warnings": _warnings(r.get("warnings")),
                             "info": _infos(r.get("info"))})
            out += mine + _summary(test.get("test_summary"), where, mine)
    return out


def _summary(summary, where: dict, mine: list[dict]) -> list[dict]:
    """A failing test summary as a result of no entity, or nothing (see parse)."""
    if not isinstance(summary, dict) or not _failing(str(summary.get("status", ""))):
        return []
    said = _warnings(summary.get("warnings"))
    if any(_failing(r["status"]) for r in mine):
        seen = {(w["message"], w["error_id"]) for r in mine for w in r["warnings"]}
        said = [w for w in said if (w["message"], w["error_id"]) not in seen]
        if not said:
            return []
    return [{**where, "gpu": None, "entity_group": None,
             "status": str(summary.get("status", "")),
             "warnings": said or _warnings("DCGM's test summary says so; no result names "
                                           "an entity"),
             "info": _infos(summary.get("info"))}]


def version_of(doc: dict) -> str | None:
    """DCGM 4 writes its version under "metadata", DCGM 3 at the document's root; a
    runtime-error document of either, in the body."""
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    for v in (meta.get("version"), doc.get("version"), body_of(doc).get("version")):
        if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v):
            return str(v)[:256]
    return None


class Stopped(Exception):
    """The probe was asked to stop (the controller's timeout or cancel, its lifeline)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, frame):
    raise Stopped(signum)


def _term_with_parent() -> None:
    """preexec_fn for dcgmi: SIGTERM (not probelib's SIGKILL) when the probe dies, so
    dcgmi still stops the diagnostic it started."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop(proc: subprocess.Popen, grace_s: float) -> tuple[str, str, str]:
    """SIGTERM, the grace for dcgmi to stop nvvs, then SIGKILL; (the signal that ended it,
    its stdout, its stderr)."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            out, err = proc.communicate(timeout=wait_s)
            return sig.name, out or "", err or ""
        except subprocess.TimeoutExpired:
            continue
    return "SIGKILL", "", ""


def run_dcgmi(argv: list[str], timeout_s: float) -> dict:
    """Run dcgmi within the probe's deadline; its exit status and output, and how it was
    stopped if it had to be. Raises Stopped when the probe itself is told to stop, once
    dcgmi is stopped."""
    run_s, grace_s = deadlines(timeout_s)
    started = time.time()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, encoding="utf-8", errors="replace",
                            preexec_fn=_term_with_parent)
    before = {s: signal.signal(s, _raise_stopped)
              for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    out = {"deadline_s": round(run_s, 3), "stop_grace_s": round(grace_s, 3)}
    try:
        try:
            stdout, stderr = proc.communicate(timeout=run_s)
        except subprocess.TimeoutExpired:
            log(f"dcgmi still running at the probe's deadline of {run_s:g} s: SIGTERM")
            out["stopped"], stdout, stderr = stop(proc, grace_s)
    except Stopped:
        # Our group got the same signal, dcgmi included; what it needs is time to act on
        # it before the probe is gone (the controller then SIGKILLs the group). A second
        # signal must not cut that short.
        for s in before:
            signal.signal(s, signal.SIG_IGN)
        stop(proc, grace_s)
        raise
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    out.update(exit_status=proc.returncode, stdout=stdout, stderr=stderr,
               elapsed_s=round(time.time() - started, 3))
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
    try:
        ran = run_dcgmi(argv, float(settings.get("timeout_s", 3600)))
    except OSError as e:
        probelib.emit(PROBE, node, [], {"applies": True, "level": level},
                      [f"{' '.join(argv)}: {e}"])
        return 0
    except Stopped as e:
        log(f"stopped by signal {e.signum}; dcgmi stopped")
        return 128 + e.signum
    text, errors = ran.pop("stdout"), []
    stderr = ran.pop("stderr")
    figures = {"applies": True, "level": level, **ran}
    try:
        doc = json.loads(text[text.find("{"):text.rfind("}") + 1])
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        results = parse(doc)
        figures["version"] = version_of(doc)
        runtime = body_of(doc).get("runtime_error")
        if runtime:  # DCGM could not run (or finish) the diagnostic: its own words
            errors.append(f"dcgmi diag: runtime error: {str(runtime)[:MAX_TEXT]}")
    except ValueError:
        results = []
        if not ran.get("stopped"):  # else the judge says why there is no document
            errors.append(f"dcgmi diag exited {ran['exit_status']} without a JSON "
                          f"document: {(stderr or text).strip()[-500:]}")
    if not results and not errors and not ran.get("stopped"):
        errors.append(f"dcgmi diag exited {ran['exit_status']} and reported no test")
    figures["results"] = results
    probelib.emit(PROBE, node, [], figures, errors)
    return 0


if __name__ == "__main__":
    probelib.finish(main())
