"""The inventory's `quarantine:` section, checked (burnin/inventory/schema.py calls
`quarantine` with its checker): the ledger, the actions and the shared-cause bar. Every
error names the line and key, as the rest of the schema's."""

from __future__ import annotations

from burnin.ledger.backends import parse_location, transport_problem
from burnin.model.nodes import QuarantineSettings, SharedCauseSettings
from burnin.model.settings import kinds_of, section

# Each section's keys, kinds and defaults are its dataclass's (burnin/model/nodes.py).
QUARANTINE_KEYS = kinds_of(QuarantineSettings)
SHARED_CAUSE_KEYS = kinds_of(SharedCauseSettings)


def quarantine(c, doc, top: dict) -> QuarantineSettings:
    """`quarantine:` of the inventory `doc` (its checked top-level `top`), with `c`'s
    errors added for what is wrong."""
    if "quarantine" not in top:
        return QuarantineSettings()
    if not c.mapping(top["quarantine"], "quarantine", doc.key_lines["quarantine"]):
        return QuarantineSettings()
    q = c.keys(top["quarantine"], QUARANTINE_KEYS, "quarantine")
    if "command" in q.get("actions", ()) and not q.get("command"):
        c.error(top["quarantine"].key_lines["actions"], "quarantine.command",
                "missing; the command action needs quarantine.command: [argv, ...]")
    if "ledger" in q and not q.get("ledger_insecure", False):
        problem = transport_problem(parse_location(q["ledger"]))
        if problem:
            c.error(top["quarantine"].key_lines["ledger"], "quarantine.ledger", problem)
    return section(QuarantineSettings,
                   {**q, "shared_cause": _shared_cause(c, top["quarantine"])})


def _shared_cause(c, body) -> SharedCauseSettings:
    """`quarantine.shared_cause:` of the `quarantine:` section's `body`."""
    if "shared_cause" not in body or not c.mapping(
            body["shared_cause"], "quarantine.shared_cause", body.key_lines["shared_cause"]):
        return SharedCauseSettings()
    s = c.keys(body["shared_cause"], SHARED_CAUSE_KEYS, "quarantine.shared_cause")
    return section(SharedCauseSettings, s)
