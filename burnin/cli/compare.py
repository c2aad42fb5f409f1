"""`burnin compare`: per node, the key figures that moved between two runs, and which of
the moves are regressions, so that a pipeline can gate on trends (exit 1).

A figure regressed when it moved the wrong way by more than the threshold, relative to
run A: down for a figure where higher is better (TFLOPS, GB/s), up for one where lower is
better (temperature); each Figure says which (Figure.better)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from burnin.errors import RunError  # noqa: F401  (raised here, caught by callers)
from burnin.figures.record_figures import key_figures, read_for_page


@dataclass(frozen=True)
class Move:
    node: str
    metric: str
    labels: dict
    old: float
    new: float
    change: float    # relative to old; inf when old was 0
    better: str      # "higher" or "lower"
    regressed: bool

    def to_dict(self) -> dict:
        d = asdict(self)
        d["change"] = None if self.change in (float("inf"), float("-inf")) else self.change
        return d


@dataclass(frozen=True)
class Comparison:
    threshold: float
    moves: tuple[Move, ...]                       # every figure that moved past the threshold
    only_a: tuple[tuple[str, str, dict], ...]     # (node, metric, labels) in run A only
    only_b: tuple[tuple[str, str, dict], ...]

    @property
    def regressions(self) -> list[Move]:
        return [m for m in self.moves if m.regressed]


def run_figures(run_dir: Path) -> dict[tuple, tuple[float, str]]:
    """{(node, metric, labels): (value, better)} of a run directory's results.jsonl."""
    path = Path(run_dir) / "results.jsonl"
    if not path.is_file():
        raise RunError(f"{path}: no such file")
    # The figures the run kept (burnin/figures/record_figures.py), not its documents: a fleet's
    # results.jsonl is hundreds of MB of telemetry that no figure here needs.
    return {(r["node"], f.metric, f.labels): (f.value, f.better)
            for r in read_for_page(path.parent, set()) if isinstance(r, dict)
            and isinstance(r.get("node"), str) for f in key_figures(r)}


def compare(a: dict[tuple, tuple[float, str]], b: dict[tuple, tuple[float, str]],
            threshold: float) -> Comparison:
    moves = []
    for key in sorted(set(a) & set(b)):
        (old, better), (new, _) = a[key], b[key]
        if old:
            change = (new - old) / abs(old)
        else:
            change = 0.0 if new == old else (float("inf") if new > old else float("-inf"))
        if abs(change) <= threshold:
            continue
        worse = change < 0 if better == "higher" else change > 0
        node, metric, labels = key
        moves.append(Move(node, metric, dict(labels), old, new, change, better, worse))
    return Comparison(threshold, tuple(moves),
                      tuple((k[0], k[1], dict(k[2])) for k in sorted(set(a) - set(b))),
                      tuple((k[0], k[1], dict(k[2])) for k in sorted(set(b) - set(a))))
