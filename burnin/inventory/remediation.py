"""The inventory's `remediation:` section, checked (burnin/inventory/schema.py calls
`remediation` with its checker): the ladder per kind of failure, the site's commands.
Every error names the line and key, as the rest of the schema's."""

from __future__ import annotations

from typing import Any

from burnin.checks import Kind
from burnin.model.remediation import KINDS, RMA, STEPS, RemediationSettings

REBOOT_WAYS = ("auto", "slurm", "command")
KEYS: dict[str, Any] = {
    "ladder": "mapping", "max_remediations": "release_after", "reset_command": "str_list",
    "reboot": Kind(lambda v: v in REBOOT_WAYS, "one of: " + ", ".join(REBOOT_WAYS)),
    "reboot_command": "str_list", "busy_command": "str_list", "ticket_command": "str_list",
    "rma_dir": "str", "reports": "str", "command_timeout_s": "positive",
    "revalidate_timeout_s": "positive",
    "output_bytes": Kind(lambda v: isinstance(v, int) and not isinstance(v, bool)
                         and 0 <= v <= 65536, "an integer from 0 to 65536"),
}
TUPLES = ("reset_command", "reboot_command", "busy_command", "ticket_command")


def remediation(c, doc, top: dict) -> RemediationSettings:
    """`remediation:` of the inventory `doc` (its checked top-level `top`), with `c`'s
    errors added for what is wrong."""
    if "remediation" not in top or not c.mapping(top["remediation"], "remediation",
                                                   doc.key_lines["remediation"]):
        return RemediationSettings()
    section = top["remediation"]
    values = c.keys(section, KEYS, "remediation")
    for key in TUPLES:
        if key in values:
            values[key] = tuple(values[key])
    if "ladder" in values:
        values["ladder"] = _ladder(c, values["ladder"])
    if values.get("reboot") == "command" and not values.get("reboot_command"):
        c.error(section.key_lines["reboot"], "remediation.reboot_command",
                "missing; reboot: command needs remediation.reboot_command: [argv, ...]")
    return RemediationSettings(**values)


def _ladder(c, ladder) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for kind, steps in ladder.items():
        line, where = ladder.key_lines[kind], f"remediation.ladder.{kind}"
        if kind not in KINDS:
            c.error(line, where, "unknown kind of failure; expected one of: " + ", ".join(KINDS))
        elif not isinstance(steps, list) or not steps or \
                any(s not in STEPS for s in steps) or len(set(steps)) != len(steps):
            c.error(line, where, "expected a list of steps, each once, of: "
                                 + ", ".join(STEPS))
        elif steps[-1] != RMA:
            # a ladder that ends before RMA leaves a node that no step healed nowhere
            c.error(line, where, f"expected the last step to be {RMA}")
        else:
            out[str(kind)] = tuple(steps)
    return out
