"""Verdicts: what the controller decided about one node for one check."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

# Control characters other than newline and tab: ESC sequences would drive the operator's
# terminal, NUL and BEL corrupt logs and XML. Shown escaped, as Python writes them.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """`text` from a node, safe to show: control characters escaped."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


@dataclass(frozen=True)
class Verdict:
    node: str
    check: str
    failures: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def __post_init__(self):
        # Failure texts quote what nodes said; they are shown, stored and reported.
        object.__setattr__(self, "failures", tuple(clean(str(f)) for f in self.failures))
        object.__setattr__(self, "warnings", tuple(clean(str(w)) for w in self.warnings))

    @property
    def passed(self) -> bool:
        return not self.failures


def majority(values: dict[str, object]) -> tuple[object | None, str]:
    """The value most nodes share, and '' ; or (None, why) when no value leads outright.

    `values` maps node name to value; nodes without a value are left out by the caller.
    """
    counts = Counter(values.values()).most_common()
    if not counts:
        return None, "no node reported a value"
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        tied = ", ".join(f"{v} on {n} node(s)" for v, n in counts if n == counts[0][1])
        return None, f"no majority ({tied})"
    return counts[0][0], ""


def assert_passed(verdict: Verdict) -> None:
    """Fail the calling test with the verdict's messages; print its warnings for the report."""
    __tracebackhide__ = True
    import pytest

    for w in verdict.warnings:
        print(f"WARNING {verdict.node} {verdict.check}: {w}")
    if verdict.failures:
        pytest.fail("\n".join(verdict.failures), pytrace=False)
