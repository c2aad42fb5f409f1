"""Evidence bundle per failed node: reports/<run-id>/nodes/<node>/, one folder a ticket
to a hardware vendor can attach: the verdicts, every raw probe output, the telemetry
series, and the node's facts (driver, versions, devices)."""

from __future__ import annotations

import json
from pathlib import Path


def write_bundle(run_dir: Path, node: str, verdicts: dict[str, tuple[str, str]],
                 records: list[dict]) -> Path:
    folder = run_dir / "nodes" / node
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"{check}: {outcome}" + (f": {message}" if message else "")
             for check, (outcome, message) in sorted(verdicts.items())]
    (folder / "verdicts.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for r in records:
        (folder / f"{r['check']}.json").write_text(json.dumps(r, indent=1), encoding="utf-8")
        data = r.get("data") or {}
        if r["check"] == "health" and r.get("ok"):
            facts = {"node": data.get("node"), "gpu": data["figures"].get("gpu"),
                     "torch": data["figures"].get("torch"),
                     "devices": [{k: d.get(k) for k in ("index", "name", "uuid", "pci_bus_id")}
                                 for d in data.get("devices", [])]}
            (folder / "facts.json").write_text(json.dumps(facts, indent=1), encoding="utf-8")
        if r["check"] == "burn" and r.get("ok"):
            series = {str(d.get("device")): d.get("telemetry") for d in data.get("devices", [])
                      if d.get("telemetry")}
            cpu = data.get("figures", {}).get("cpu_telemetry")
            if cpu:
                series["cpu"] = cpu
            (folder / "telemetry.json").write_text(json.dumps(series, indent=1),
                                                   encoding="utf-8")
    return folder
