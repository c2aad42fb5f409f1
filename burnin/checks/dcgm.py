"""The dcgm check's judge: NVIDIA DCGM's own diagnostic (`dcgmi diag -r <level> -j`), on
GPU nodes where DCGM is installed, judged by what DCGM means rather than by its words.

dcgmi never prints "Warn" in JSON: DCGM 4 prints a warning's result as "Fail", DCGM 3
prints only Pass, Skip and Fail, and dcgmi counts every error, of any severity, as a
failure (`dcgmi/Diag.cpp`, `Diag::GetFailureResult`). A "Fail" only warns when every
error it carries is one of the few codes that mean "can run, watch it" (dcgm_codes.WATCH:
clock events for temperature or power, corrected single-bit errors, each of
DCGM_ERROR_MONITOR severity as this DCGM gave it); any other code fails the node, those
of MONITOR severity too (108 fabric manager not initialized, 16/17 NVSwitch, 123 fabric
probe state, 131 contained error), and so does an error without a code. dcgmi's exit
status agrees or overrules: 226 (DCGM_ST_NVVS_ERROR) stands only beside results whose
every error is watched; 205 (an error DCGM says needs isolating) or any other non-zero
status fails the node. The check applies only where the node's health facts found
`dcgmi` (Check.tool): elsewhere it is not collected and admission does not require it.
Should the probe still find no dcgmi, it says so and the node passes."""

from __future__ import annotations

from burnin.checks.base import Check, Judging, Kind, Setting, timeout
from burnin.checks.dcgm_codes import NAMED, SEVERITIES, WATCH, watched
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome
from burnin.probe.shapes import Bool, Int, List, Num, Obj, Str, document

# dcgm_structs.h's dcgmReturn_t, as dcgmi's exit status (its main returns the code).
NVVS_ERROR = 226
EXIT_NAMES = {226: "DCGM_ST_NVVS_ERROR: the diagnostic reported an error",
              205: "DCGM_ST_NVVS_ISOLATE_ERROR: DCGM says a GPU must be isolated",
              203: "DCGM_ST_NVVS_KILLED: the diagnostic was stopped by a signal"}
QUIET = ("pass", "skip", "not run")       # results that say nothing against the node
WEIGHED = ("fail", "warn")                # judged by their errors' codes and severity


def _warning(w: dict) -> str:
    sev = w.get("severity")
    named = ("no severity given" if sev is None
             else SEVERITIES.get(sev, f"unknown severity {sev}"))
    code = w.get("error_id")
    name = WATCH[code][0] if code in WATCH else NAMED.get(code) if code is not None else None
    ident = "" if code is None else f"DCGM error id {code}{f' {name}' if name else ''}, "
    return f"{w['message']} ({ident}{named})"


def _weigh(r: dict, level) -> tuple[str, str] | None:
    """('fail' or 'warn', the line saying what DCGM said) for a result that is not quiet."""
    status = r["status"].strip().lower()
    if status in QUIET:
        return None
    on = (f" on {r.get('entity_group') or 'GPU'} {r['gpu']}" if r.get("gpu") is not None
          else "")
    head = f"DCGM level {level} {r['category']}/{r['test']}{on}: {r['status']}"
    said = "; ".join(_warning(w) for w in r.get("warnings") or [])
    if status not in WEIGHED:
        return "fail", f"{head} (a result burnin does not know): {said or 'no warning'}"
    errors = r.get("warnings") or []
    if errors and all(watched(w.get("error_id"), w.get("severity")) for w in errors):
        return "warn", f"{head}, only errors DCGM says to watch: {said}"
    return "fail", f"{head}: {said or 'no warning, so no error code given'}"


def _stopped(figs: dict) -> str:
    how = figs["stopped"]
    line = (f"dcgmi diag did not finish within the probe's deadline of "
            f"{figs.get('deadline_s', 0):g} s (the check's timeout_s, less time to stop and "
            f"report); ")
    if how == "SIGTERM":
        return line + "stopped with SIGTERM, on which dcgmi stops the diagnostic"
    return line + (f"it did not stop within {figs.get('stop_grace_s', 0):g} s of SIGTERM and "
                   f"was killed ({how}): nvvs may still be running on the GPUs")


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "dcgm", (outcome.reason,))
    figs = outcome.data["figures"]
    failures = [f"probe error: {e}" for e in outcome.data["errors"]]
    warnings: list[str] = []
    if not figs.get("applies"):
        return Verdict(node.name, "dcgm", tuple(failures))
    for r in figs.get("results", []):
        weighed = _weigh(r, figs.get("level"))
        if weighed is not None:
            (failures if weighed[0] == "fail" else warnings).append(weighed[1])
    if figs.get("stopped"):
        failures.insert(0, _stopped(figs))
    status = figs.get("exit_status")
    # 226 is how dcgmi exits for any error: it stands only beside warnings whose every
    # error is watched; without one, or with any other status, the exit says something
    # no result did.
    if status and not failures and not (status == NVVS_ERROR and warnings):
        named = f" ({EXIT_NAMES[status]})" if status in EXIT_NAMES else ""
        why = ("though every error it gave is one DCGM says to watch" if warnings
               else "without a failed test")
        failures.append(f"dcgmi diag exited {status}{named} {why}")
    return Verdict(node.name, "dcgm", tuple(failures), tuple(warnings))


def evidence(record: dict) -> dict[str, object]:
    return {"dcgm.json": record["data"]["figures"]}


CODE = Int(-(2**31), 2**32, null=True)   # C ints in DCGM's structures
# exit_status is null when dcgmi outlived even SIGKILL (stuck in the kernel).
WARNING = Obj(required=("message",), message=Str(4096), error_id=CODE, category=CODE,
              severity=CODE)
RESULT = Obj(required=("category", "test", "status"), category=Str(256), test=Str(256),
             gpu=Str(64, null=True), entity_group=Str(64, null=True), status=Str(64),
             warnings=List(WARNING, max=100), info=List(Str(4096), max=100))
SCHEMA = document(Obj(), Obj(
    required=("applies",), applies=Bool(), why=Str(4096), level=Int(1, 4),
    exit_status=Int(-255, 255, null=True), elapsed_s=Num(0), version=Str(256, null=True),
    deadline_s=Num(0), stop_grace_s=Num(0), stopped=Str(16),
    results=List(RESULT, max=10_000)))

CHECK = Check(
    name="dcgm", page_order=90, doc="NVIDIA DCGM's diagnostic passes, where DCGM is installed",
    judge=judge, schema=SCHEMA, evidence=evidence, gpu_only=True,
    tool=lambda settings: settings["dcgmi"], settings={
        "timeout_s": timeout(900, 1800, 7200),
        "level": Setting(Kind(lambda v: v in (1, 2, 3, 4), "1, 2, 3 or 4"),
                         {"quick": 1, "standard": 2, "extended": 3}, "dcgmi diag -r level"),
        "dcgmi": Setting("str", "dcgmi", "the dcgmi command: a name on PATH or a path"),
    })
