"""metrics.prom: the run in Prometheus text format, for node_exporter's textfile collector.
Metric names and labels are documented in README.md and stay stable."""

from __future__ import annotations

from pathlib import Path

from burnin.figures import key_figures
from burnin.files import write_atomically


def _labels(pairs) -> str:
    def esc(v: str) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in pairs) + "}"


def render(cluster: str, run_id: str, finished: float,
           verdicts: dict[str, dict[str, tuple[str, str]]], records: list[dict]) -> str:
    lines = ["# HELP burnin_run_timestamp_seconds When the run finished.",
             "# TYPE burnin_run_timestamp_seconds gauge",
             f"burnin_run_timestamp_seconds{_labels([('cluster', cluster), ('run_id', run_id)])}"
             f" {finished:.0f}",
             "# HELP burnin_check_passed 1 when the node passed the check in the run, else 0.",
             "# TYPE burnin_check_passed gauge"]
    for node in sorted(verdicts):
        for check, (outcome, _) in sorted(verdicts[node].items()):
            labels = _labels([("cluster", cluster), ("node", node), ("check", check)])
            lines.append(f"burnin_check_passed{labels} {int(outcome == 'passed')}")
    by_metric: dict[str, tuple[str, list[str]]] = {}
    for r in records:
        for f in key_figures(r):
            labels = _labels([("cluster", cluster), ("node", r["node"]), *f.labels])
            by_metric.setdefault(f.metric, (f.help, []))[1].append(
                f"burnin_{f.metric}{labels} {f.value:g}")
    for metric, (help_text, samples) in sorted(by_metric.items()):
        lines += [f"# HELP burnin_{metric} {help_text}", f"# TYPE burnin_{metric} gauge",
                  *samples]
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> None:
    write_atomically(path, text)  # the textfile collector never reads half a file
