"""What node-check's checks return: findings, each one line naming the device, the figure
and the bound, as the run's verdicts read; and each check's result."""

from __future__ import annotations

from dataclasses import dataclass, field

from burnin.core.safetext import safe_text
from burnin.model.node_check import NODE_CHECK_KEYS, NODE_CHECKS  # noqa: F401  (callers)


@dataclass(frozen=True)
class Finding:
    """One reason the node is not fit for jobs (or, with `warn`, worth a look).

    `event`: a thing that happened (an XID, an SXid) rather than a state the next check
    sees again; it is reported once (the cursor), and a drain for it is not lifted by a
    later clean check in the same boot."""

    check: str
    text: str
    warn: bool = False
    event: bool = False

    def __post_init__(self):
        # Text read from the node (kernel log lines, NVML names, paths) made safe once,
        # as the run makes a probe's text safe: one line, no control or bidi characters.
        object.__setattr__(self, "text", safe_text(str(self.text), multiline=False))

    def line(self) -> str:
        return f"{self.check}: {self.text}"


@dataclass(frozen=True)
class CheckResult:
    """A check's findings; `finished` False when it ran out of its time budget."""

    check: str
    findings: tuple[Finding, ...] = ()
    finished: bool = True
    elapsed_s: float = 0.0
    # What the check wants kept for the next node-check (the cursor, last good figures).
    state: dict = field(default_factory=dict)

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if not f.warn]


def fail(check: str, text: str, event: bool = False) -> Finding:
    return Finding(check, text, warn=False, event=event)


def warn(check: str, text: str) -> Finding:
    return Finding(check, text, warn=True)
