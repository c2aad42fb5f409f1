"""A check's outcome on a node: the one vocabulary of junit.xml, metrics.prom,
summary.html, admission and the gate. Each output prints its own word from here: JUnit's
element (<failure>, <error>, <skipped>), metrics.prom's `outcome` label, the page's."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Outcome(str, Enum):
    PASSED = "passed"
    FAILED = "failed"        # the judge failed the node (JUnit: <failure>)
    ERROR = "error"          # its test could not run to a verdict (JUnit: <error>)
    SKIPPED = "skipped"      # not judged: another run holds the node, or in quarantine
    NOT_RUN = ""             # no testcase for it (the page's "not run")

    def __str__(self) -> str:  # the word itself, in f-strings and joins alike
        return self.value

    @property
    def junit(self) -> str | None:
        """The JUnit element that marks it: failure, error, skipped; None for passed."""
        return JUNIT.get(self)

    @property
    def word(self) -> str:
        """How people read it: the value, and 'not run' for a check that did not run."""
        return self.value or "not run"

    @property
    def bad(self) -> bool:
        """Failed or errored: the node's own failure, which quarantine and evidence follow."""
        return self in (Outcome.FAILED, Outcome.ERROR)

    @classmethod
    def of_junit(cls, tag: str) -> Outcome:
        """The outcome a JUnit testcase's element (or its absence: '') marks."""
        return {v: k for k, v in JUNIT.items()}.get(tag, cls.PASSED)


JUNIT = {Outcome.FAILED: "failure", Outcome.ERROR: "error", Outcome.SKIPPED: "skipped"}
JUNIT_TAGS = tuple(JUNIT.values())
# What a testcase can say, in order: metrics.prom's one-hot burnin_check_outcome.
RESULTS = (Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED)


@dataclass
class CaseResult:
    """One node's outcome of one check, merged from pytest's setup/call/teardown reports."""

    node: str
    check: str
    outcome: Outcome = Outcome.PASSED
    message: str = ""
    output: str = ""
    stdout: str = ""
    duration_s: float = 0.0
    floors: dict[str, float] = field(default_factory=dict)  # the judge's (Verdict.floors)
    # The kinds of the node's own evidence among its failures (Verdict.own), comma-joined:
    # such a case is never part of a shared-cause incident (burnin/gate/incidents.py).
    own: str = ""

    def add_phase(self, when: str, outcome: str, text: str, stdout: str,
                  duration: float) -> None:
        self.duration_s += duration
        if stdout:
            self.stdout = stdout
        if outcome == "passed":
            return
        if outcome == "skipped":  # pytest's words, from here on ours
            if self.outcome == Outcome.PASSED:
                self.outcome, self.message, self.output = Outcome.SKIPPED, first_line(text), text
            return
        kind = Outcome.FAILED if when == "call" else Outcome.ERROR
        if self.outcome in (Outcome.PASSED, Outcome.SKIPPED) or (
                kind == Outcome.FAILED and self.outcome == Outcome.ERROR):
            self.outcome, self.message, self.output = kind, first_line(text), text


def first_line(text: str) -> str:
    """A failure's text as junit.xml's message attribute: its lines joined, bounded."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    # pytest.fail(..., pytrace=False) gives the bare messages; keep them all, joined.
    return "; ".join(ln.strip() for ln in lines[:20])[:4000]


@dataclass(frozen=True)
class ActionResult:
    """What one quarantine action (burnin/gate/actions.py) did to a node: here, below the
    gate, because the ledger records it in the run's transaction."""

    action: str
    node: str
    ok: bool
    message: str
    drained: bool = False  # burnin drained the node (and so may resume it later)
