"""metrics.prom: the run in Prometheus text format, for node_exporter's textfile collector.

Prometheus conventions: base units in names, with values converted here (a check's
Figure keeps the unit the check reports, for summary.html and `burnin compare`: GB/s
becomes `_bytes_per_second`, TFLOPS `_flops_per_second`); one `burnin_run_info` series
rather than a run-id label on every series; GPU UUIDs as a `UUID` label beside `device`,
the label dcgm-exporter uses, so the two join; a check's outcome as a one-hot
`burnin_check_outcome` over passed/failed/error/skipped, so a skip is not a failure; the
ledger's word on each node. Names and labels are documented in README.md and stay stable.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from pathlib import Path

from burnin.core.safefiles import write_atomically
from burnin.core.safetext import safe_text
from burnin.figures.record_figures import key_figures
from burnin.model.outcome import RESULTS, Outcome

# A figure's unit, the end of its name, -> the base unit's name and the factor to it.
# Decimal prefixes, as the checks report them (GB/s as fio and nccl-tests define it).
BASE_UNITS = (
    ("_gbps", "_bytes_per_second", 1e9, "bytes per second"),
    ("_tflops", "_flops_per_second", 1e12, "floating-point operations per second"),
    ("_celsius", "_celsius", 1.0, "degrees Celsius"),
    ("_seconds", "_seconds", 1.0, "seconds"),
    ("_tokens_per_second", "_tokens_per_second", 1.0, "tokens per second"),
    ("_bytes", "_bytes", 1.0, "bytes"),
    ("_ratio", "_ratio", 1.0, "a ratio, 0 to 1"),
    ("_words", "_words", 1.0, "words"),
    ("_errors", "_errors", 1.0, "errors"),
    ("_lanes", "_lanes", 1.0, "lanes"),
    ("_generation", "_generation", 1.0, "the PCIe generation's number"),
)
UUID_LABEL = "UUID"  # dcgm-exporter's name for it: `on(UUID)` joins the two


def base_unit(metric: str) -> tuple[str, float, str]:
    """(Prometheus name without the burnin_ prefix, factor, unit in words) of a Figure's
    metric. ValueError for a unit not in BASE_UNITS: a check's figure must end in one."""
    for unit, base, factor, words in BASE_UNITS:
        if metric.endswith(unit):
            return metric[:-len(unit)] + base, factor, words
    raise ValueError(f"figure {metric!r}: its name ends in no known unit "
                     f"({', '.join(u[0] for u in BASE_UNITS)})")


# Series one node's record of one check may add: far above what an honest document gives
# (64 HCA ports and 8 GPUs' 18 NVLink links, each with its counters), far below what a
# node claiming thousands of counters would make of the file.
MAX_SERIES_PER_RECORD = 4096


def _esc(v) -> str:
    # A fleet's file repeats a few thousand label values (nodes, devices, checks) in
    # hundreds of thousands of series: each is escaped once.
    try:
        return _escaped(v)
    except TypeError:  # unhashable: not a label value any check writes, but escaped all the same
        return _escaped.__wrapped__(v)


@functools.lru_cache(maxsize=1 << 16, typed=True)  # True is not 1 here
def _escaped(v) -> str:
    # Control characters (a carriage return among them) are escaped as text first; then
    # what the exposition format itself escapes: backslash, double quote, newline.
    return safe_text(str(v)).replace("\\", "\\\\").replace(
        '"', '\\"').replace("\n", "\\n")


_base_unit = functools.lru_cache(maxsize=1024)(base_unit)


@functools.lru_cache(maxsize=1 << 14)
def _label_tail(labels: tuple) -> str:
    return "".join(f',{k}="{_esc(v)}"' for k, v in labels)


@functools.lru_cache(maxsize=1 << 14)
def _device(labels: tuple):
    return dict(labels).get("device")


def _labels(pairs) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in pairs) + "}"


def _family(name: str, help_text: str, samples: Iterable[str]) -> Iterator[str]:
    """A family's lines, each ending in a newline."""
    yield f"# HELP {name} {help_text}\n"
    yield f"# TYPE {name} gauge\n"
    for sample in samples:
        yield sample + "\n"


def _placed(f, families: dict[str, tuple[str, dict[str, str]]]) -> tuple:
    """What every series of a figure's metric and labels shares: ("burnin_" and its name
    in base units, the factor to them, its labels after the node's as text, its device
    (None when it has none), and its family's samples, made with the first figure of the
    family's help). The same as _labels([c, node, *f.labels, (UUID, ...)]), made once."""
    name, factor, words = _base_unit(f.metric)
    try:
        tail, device = _label_tail(f.labels), _device(f.labels)
    except TypeError:  # a label value that cannot be hashed: made here, as it is
        tail, device = _label_tail.__wrapped__(f.labels), _device.__wrapped__(f.labels)
    samples = families.setdefault(name, (f"{f.help}, in {words}.", {}))[1]
    return f"burnin_{name}", factor, tail, device, samples


def _ends(result) -> tuple[str, list[str]]:
    """What follows a check's labels in its burnin_check_passed line and in each of its
    burnin_check_outcome lines, for a check of this outcome."""
    return (f"}} {int(result == Outcome.PASSED)}",
            [f',outcome="{_esc(o.value)}"}} {int(result == o)}' for o in RESULTS])


def _uuid_labels(record: dict) -> dict[str, str]:
    """{device: its UUID label's text, ',UUID="..."'}, made once a record."""
    return {device: f',{UUID_LABEL}="{_esc(uuid)}"' for device, uuid in _uuids(record).items()}


def _uuids(record: dict) -> dict[str, str]:
    """{device: UUID} of a probe record's devices that have one (GPUs, not CPUs)."""
    out = {}
    for dev in (record.get("data") or {}).get("devices") or ():
        if isinstance(dev, dict) and dev.get("uuid") and dev.get("device") is not None:
            out[str(dev["device"])] = str(dev["uuid"])
    return out


def render(cluster: str, run_id: str, finished: float,
           verdicts: dict[str, dict[str, tuple[str, str]]], records: list[dict],
           quarantined: dict[str, bool] | None = None,
           speeds: dict[str, tuple[float, str]] | None = None) -> str:
    """The text of metrics.prom. `verdicts`: {node: {check: (junit outcome, message)}};
    `quarantined`: {node: in the ledger at the end of the run}, None when not known
    (`burnin report` renders a past run again)."""
    return "".join(lines(cluster, run_id, finished, verdicts, records, quarantined, speeds))


def lines(cluster: str, run_id: str, finished: float,
          verdicts: dict[str, dict[str, tuple[str, str]]], records: list[dict],
          quarantined: dict[str, bool] | None = None,
          speeds: dict[str, tuple[float, str]] | None = None) -> Iterator[str]:
    """render()'s text a line at a time, made as it is written: a fleet's metrics.prom is
    a million lines (28 KiB a node), which held whole, and again as one text, were the
    largest part of a passing fleet's peak."""
    c = ("cluster", cluster)
    yield from _family("burnin_run_info", "The last run: its id, as a label, value 1.",
                       [f"burnin_run_info{_labels([c, ('run_id', run_id)])} 1"])
    yield from _family("burnin_last_run_timestamp_seconds", "When the last run finished.",
                       [f"burnin_last_run_timestamp_seconds{_labels([c])} {finished:.0f}"])
    yield from _family("burnin_check_passed", "1 when the node passed the check in the last "
                       "run, else 0 (failed, error or skipped).",
                       _verdict_series(cluster, verdicts, passed=True))
    yield from _family("burnin_check_outcome", "The check's outcome on the node in the last "
                       "run: 1 for the outcome it had (passed, failed, error, skipped), 0 for "
                       "the others.", _verdict_series(cluster, verdicts, passed=False))
    if quarantined is not None:
        yield from _family("burnin_node_quarantined", "1 when the node is in burnin's "
                           "quarantine ledger at the end of the run, else 0.",
                           (f"burnin_node_quarantined{_labels([c, ('node', n)])} {int(q)}"
                            for n, q in sorted(quarantined.items())))
    yield from _figure_families(cluster, records)
    if speeds:  # {node: (relative speed, the check that sets it)}, from junit.xml
        yield from _family(
            "burnin_node_relative_speed", "The node's slowest speed-bearing figure (TFLOPS, "
            "busbw, storage or PCIe GB/s) over the fleet's median of it: a synchronous job of "
            "N nodes that takes the node in loses N x (1 - this) node-hours an hour.",
            (f"burnin_node_relative_speed{_labels([c, ('node', n), ('check', check)])} "
             f"{speed:.6g}" for n, (speed, check) in sorted(speeds.items())))


def _verdict_series(cluster: str, verdicts: dict[str, dict[str, tuple[str, str]]],
                    passed: bool) -> Iterator[str]:
    """burnin_check_passed's samples (`passed`) or burnin_check_outcome's, node by node."""
    head = f'{{cluster="{_esc(cluster)}",node="'
    ends: dict[object, tuple[str, list[str]]] = {}  # an outcome -> its lines' ends
    for node in sorted(verdicts):
        at = f'{head}{_esc(node)}",check="'
        for check, (result, _) in sorted(verdicts[node].items()):
            base = f'{at}{_esc(check)}"'
            try:
                one, each = ends[result]
            except KeyError:
                one, each = ends[result] = _ends(result)
            except TypeError:  # an outcome that cannot be hashed: not ours, made here
                one, each = _ends(result)
            if passed:
                yield f"burnin_check_passed{base}{one}"
            else:  # metrics.prom's label values are the outcomes' own words
                for end in each:
                    yield f"burnin_check_outcome{base}{end}"


def _figure_families(cluster: str, records: list[dict]) -> Iterator[str]:
    """The families of the records' key figures, each sample once per series. A family's
    samples must be together, so every series is held until the last record is read: its
    name (the dict's key) and its value's text, the line made as it is written."""
    families: dict[str, tuple[str, dict[str, str]]] = {}
    placed: dict[tuple, tuple] = {}  # (metric, labels) -> _placed's: a fleet has dozens
    for r in records:
        uuids = None
        head = f'{{cluster="{_esc(cluster)}",node="{_esc(r["node"])}"'
        for f in key_figures(r)[:MAX_SERIES_PER_RECORD]:
            try:
                prefix, factor, tail, device, samples = placed[(f.metric, f.labels)]
            except KeyError:
                prefix, factor, tail, device, samples = placed[(f.metric, f.labels)] = \
                    _placed(f, families)
            except TypeError:  # a label value that cannot be hashed: placed for itself
                prefix, factor, tail, device, samples = _placed(f, families)
            if device is not None:
                uuids = _uuid_labels(r) if uuids is None else uuids
                tail += uuids.get(device, "")
            series = f"{prefix}{head}{tail}}}"
            # One sample per series: a node repeating a device or port says it once.
            if series not in samples:
                samples[series] = f"{f.value * factor:.12g}"
    for name, (help_text, samples) in sorted(families.items()):
        yield from _family(f"burnin_{name}", help_text,
                           (f"{series} {value}" for series, value in samples.items()))


def replace_soon(cluster: str, listed: list | None) -> str:
    """metrics.prom's replace-soon series (burnin/figures/replace_soon.py), '' for a run
    without a list: per node, reason (the counter) and device, 1 while listed and the day
    its trend reaches the limit (when it reached it, for one past it)."""
    if listed is None:
        return ""
    c = ("cluster", cluster)
    on, when = [], []
    for findings in listed:
        for f in findings:
            labels = _labels([c, ("node", f.node), ("reason", f.counter), ("device", f.device)])
            on.append(f"burnin_replace_soon{labels} 1")
            when.append(f"burnin_replace_soon_projected_timestamp_seconds{labels} "
                        f"{f.projected:.0f}")
    return "".join([
        *_family("burnin_replace_soon", "1 for each reason the node is on the replace-soon "
                 "list: a wear counter (reason) of a device whose trend reaches its limit "
                 "within the horizon, or has reached it.", on),
        *_family("burnin_replace_soon_projected_timestamp_seconds", "When the reason's "
                 "trend reaches its limit (or reached it), in Unix seconds.", when)])


def write(path: Path, text: str | Iterable[str]) -> None:
    write_atomically(path, text)  # the textfile collector never reads half a file
