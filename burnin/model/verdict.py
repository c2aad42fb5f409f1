"""Verdicts: what the controller decided about one node for one check."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from burnin.core.safetext import safe_text

K = TypeVar("K")  # what majority's values are keyed by: node names, or ranks


def clean(text: str) -> str:
    """`text` from a node, safe to show and store: control and bidi characters escaped,
    lone surrogates replaced (burnin/core/safetext.py)."""
    return safe_text(text)


@dataclass(frozen=True)
class FailureKind:
    """A kind of failure a check's judge reports, declared in its Check (`failure_kinds`):
    whether the evidence is the node's own. Own evidence (a wrong product, an XID, an
    ECC error, a lost GPU, a diverged replica) quarantines its node however many nodes
    show it; a failure of a kind not own (a floor, throughput, reachability, a link) may
    have its cause outside the node, and many of them may be one shared-cause incident
    (burnin/gate/incidents.py). Calling it tags a failure text: `XID(f"... {code}")`."""

    name: str
    own: bool
    doc: str = ""

    def __call__(self, text: str) -> str:
        """`text`, a Failure of this kind (a str to the lists judges build)."""
        return Failure(text, self)


class Failure(str):
    """A judge's failure text carrying its kind (None: a failure of no declared kind,
    which is not the node's own evidence)."""

    kind: FailureKind | None

    def __new__(cls, text: str, kind: FailureKind | None = None) -> Failure:
        f = super().__new__(cls, text)
        f.kind = kind
        return f

    # Pickled whole (xdist, copies): its kind travels with it.
    def __reduce__(self) -> tuple[type, tuple[str, FailureKind | None]]:
        return (Failure, (str(self), self.kind))


def kind_of(failure: str) -> FailureKind | None:
    """The kind a failure text carries, or None."""
    return failure.kind if isinstance(failure, Failure) else None


def like(text: str, failure: str) -> str:
    """`text` (a failure's words, said again: with its device before it) of the kind
    `failure` carries."""
    return Failure(text, kind_of(failure))


@dataclass(frozen=True)
class Verdict:
    node: str
    check: str
    failures: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # Why the node was not judged at all (another run holds it): neither passed nor
    # failed, so neither admitted nor quarantined.
    skipped: str = ""
    # The floors the judge held this node's figures to, by the figure family they bound
    # ("burn": TFLOPS per device, "storage read": GB/s per GPU, ...): summary.html draws
    # these and nothing else, so the page shows what the judge used.
    floors: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Failure texts quote what nodes said; they are shown, stored and reported.
        # Cleaned, each keeping its kind (FailureKind): the gate reads it.
        object.__setattr__(self, "failures", tuple(Failure(clean(str(f)), kind_of(f))
                                                   for f in self.failures))
        object.__setattr__(self, "warnings", tuple(clean(str(w)) for w in self.warnings))
        object.__setattr__(self, "skipped", clean(str(self.skipped)))
        object.__setattr__(self, "floors", {str(k): float(v) for k, v in self.floors.items()
                                            if v is not None})

    @property
    def passed(self) -> bool:
        return not self.failures and not self.skipped

    @property
    def own(self) -> tuple[str, ...]:
        """The names of the kinds of its failures that are the node's own evidence, in
        order, once each: such a failure is never part of a shared-cause incident."""
        names = [k.name for f in self.failures if (k := kind_of(f)) is not None and k.own]
        return tuple(dict.fromkeys(names))


def majority(values: Mapping[K, object]) -> tuple[object | None, str]:
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
    """Fail the calling test with the verdict's messages (skip it, for a node not judged);
    print its warnings for the report."""
    __tracebackhide__ = True
    import pytest

    for w in verdict.warnings:
        print(f"WARNING {verdict.node} {verdict.check}: {w}")
    if verdict.skipped:
        pytest.skip(verdict.skipped)
    if verdict.failures:
        pytest.fail("\n".join(verdict.failures), pytrace=False)
