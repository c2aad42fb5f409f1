"""The dcgm check's judge: NVIDIA DCGM's own diagnostic (`dcgmi diag -r <level> -j`), on
GPU nodes where DCGM is installed. Each DCGM test that fails on a GPU fails the node with
DCGM's own message; a warning warns. The check applies only where the node's health
facts found `dcgmi` (Check.tool): elsewhere it is not collected and admission does not
require it. Should the probe still find no dcgmi, it says so and the node passes."""

from __future__ import annotations

from burnin.checks.base import Check, Judging, Setting, timeout
from burnin.nodes import Node
from burnin.probe import ProbeOutcome
from burnin.schema import Bool, Int, List, Num, Obj, Str, document
from burnin.verdict import Verdict


def judge(node: Node, outcome: ProbeOutcome, j: Judging) -> Verdict:
    if not outcome.ok:
        return Verdict(node.name, "dcgm", (outcome.reason,))
    figs = outcome.data["figures"]
    failures = [f"probe error: {e}" for e in outcome.data["errors"]]
    warnings: list[str] = []
    if not figs.get("applies"):
        return Verdict(node.name, "dcgm", tuple(failures))
    for r in figs.get("results", []):
        status = r["status"].lower()
        if status not in ("fail", "warn"):
            continue
        on = (f" on {r.get('entity_group') or 'GPU'} {r['gpu']}" if r.get("gpu") is not None
              else "")
        said = "; ".join(r.get("warnings") or []) or "no message"
        line = f"DCGM level {figs.get('level')} {r['category']}/{r['test']}{on}: {status}: {said}"
        (failures if status == "fail" else warnings).append(line)
    if figs.get("exit_status") and not failures:
        failures.append(f"dcgmi diag exited {figs['exit_status']} without a failed test")
    return Verdict(node.name, "dcgm", tuple(failures), tuple(warnings))


def evidence(record: dict) -> dict[str, object]:
    return {"dcgm.json": record["data"]["figures"]}


MESSAGES = List(Str(4096), max=100)
RESULT = Obj(required=("category", "test", "status"), category=Str(256), test=Str(256),
             gpu=Str(64, null=True), entity_group=Str(64, null=True), status=Str(64),
             warnings=MESSAGES, info=MESSAGES)
SCHEMA = document(Obj(), Obj(
    required=("applies",), applies=Bool(), why=Str(4096), level=Int(1, 4),
    exit_status=Int(-255, 255), elapsed_s=Num(0), version=Str(256, null=True),
    results=List(RESULT, max=10_000)))

CHECK = Check(
    name="dcgm", doc="NVIDIA DCGM's diagnostic passes, where DCGM is installed",
    judge=judge, schema=SCHEMA, evidence=evidence, gpu_only=True,
    tool=lambda settings: settings["dcgmi"], settings={
        "timeout_s": timeout(900, 1800, 7200),
        "level": Setting("dcgm_level", {"quick": 1, "standard": 2, "extended": 3},
                         "dcgmi diag -r level"),
        "dcgmi": Setting("str", "dcgmi", "the dcgmi command: a name on PATH or a path"),
    })
