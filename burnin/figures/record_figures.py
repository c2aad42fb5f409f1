"""The key figures of a probe record (a results.jsonl line), in one place: metrics.prom,
summary.html and `burnin compare` all read them from here, and each check declares its
own (Check.figures).

Figures, not documents: as the run records each check it also keeps, in KEPT beside
results.jsonl, every line's figures (worked out then, from the whole document) and its
document without its series (telemetry samples, TFLOPS over time: what makes a fleet's
results.jsonl hundreds of MB). publish reads that, and results.jsonl only for the nodes
whose whole section and evidence it writes (the failing ones)."""

from __future__ import annotations

import functools
import gc
import itertools
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from burnin.checks import CHECKS, Figure, Measure

__all__ = ["KEPT", "Figure", "Measure", "key_figures", "kept_line", "measure", "read_for_page",
           "read_records", "whole_records"]

KEPT = ".kept.jsonl"
# A list of more than this many numbers (or pairs of them) in a document is a series:
# the kept line leaves it out. Sweeps, devices and ports (lists of objects) stay.
SERIES = 32
IDENTITY = ("device", "index", "name", "uuid")


def measure(metric: str) -> Measure | None:
    """What the checks declare a figure of this metric name to be (Check.measures), or
    None: a figure no check describes reads as its metric name and labels."""
    return _measure(metric, len(CHECKS))  # a fleet's page asks for each of 450,000 figures


@functools.lru_cache(maxsize=1024)
def _measure(metric: str, checks: int) -> Measure | None:
    for check in CHECKS.values():
        for m in check.measures:
            if m.metric == metric:
                return m
    return None


@contextmanager
def paused_gc():
    """Parsing and drawing a fleet build millions of small lists, dicts and figures, none
    of them cyclic: the cyclic collector would walk every one kept so far, again and
    again (half the parse time, a third of publish's)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_records(path: Path) -> list[dict]:
    """results.jsonl, skipping a torn last line (a run killed mid-write)."""
    out = []
    with paused_gc(), open(path, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def _slim(v, depth: int = 0):
    if isinstance(v, dict):
        return {k: _slim(x, depth + 1) for k, x in v.items() if not _series(x)}
    if isinstance(v, list) and depth < 8:
        return [_slim(x, depth + 1) for x in v]
    return v


def _series(v) -> bool:
    return type(v) is list and len(v) > SERIES and not isinstance(v[0], dict)


def _kept_data(data):
    """A document as kept: its scalars, its node-wide `figures` without series (the
    all-reduce's sweep stays), the `env` it ran under, and of each device only who it is
    (IDENTITY): what the fleet's charts, the node's heading and metrics.prom's UUID
    labels read besides the figures."""
    if not isinstance(data, dict):
        return data
    out = {k: v for k, v in data.items() if not isinstance(v, (dict, list))}
    out["figures"] = _slim(data.get("figures"))
    if isinstance(data.get("env"), dict):  # the inventory's env:, in the node's heading
        out["env"] = _slim(data["env"])
    listed = data.get("devices")
    devices = listed if isinstance(listed, list) else []
    out["devices"] = [{k: d[k] for k in IDENTITY if k in d} for d in devices
                      if isinstance(d, dict)]
    return out


def kept(record: dict) -> dict:
    """A record as KEPT holds it: its figures from the whole document, as `kept_keys`
    (the text of a JSON list of [metric, labels, better, help], the same on every node
    of a fleet that has the same devices: publish parses each such text once) and
    `kept_figures` (their values, in that order), and the document cut to what the page
    and metrics.prom read besides (_kept_data). key_figures reads such a record's figures
    back as they were."""
    figs = key_figures(record)
    out = {k: v for k, v in record.items() if k != "data"}
    out["data"] = _kept_data(record.get("data"))
    keys = tuple((f.metric, f.labels, f.better, f.help) for f in figs)
    try:
        out["kept_keys"] = _keys_text(keys)
    except TypeError:  # a label value that cannot be hashed: its own text, then
        out["kept_keys"] = _keys_text.__wrapped__(keys)
    out["kept_figures"] = [f.value for f in figs]
    return out


@functools.lru_cache(maxsize=256)  # a fleet's nodes share a few: the run writes each once
def _keys_text(keys: tuple) -> str:
    return json.dumps(keys, separators=(",", ":"), allow_nan=False)


def kept_line(record: dict) -> str:
    """The KEPT line of a results.jsonl record (the run appends it as it appends the
    record). A document that cannot be kept keeps its node, check and verdict-side
    fields: the page then says its figures are missing; nothing here raises."""
    try:
        return json.dumps(kept(record), allow_nan=False) + "\n"
    except (ValueError, TypeError, RecursionError):
        return json.dumps({k: record.get(k) for k in ("node", "check", "ok", "reason")
                           if isinstance(record.get(k), (str, bool))} | {"kept_figures": []},
                          allow_nan=False) + "\n"


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        yield from f


def read_for_page(run_dir: Path, whole: set[str]) -> list[dict]:
    """The records publish draws from: the whole record of each node in `whole` (those
    whose section and evidence are complete), the kept one (figures, no series) of every
    other. From KEPT when it holds every results.jsonl line, results.jsonl then parsed
    only for `whole`; else (a run from before KEPT, one cut short) from results.jsonl,
    each other node's record kept as it is read, never all held at once."""
    results, kept_path = run_dir / "results.jsonl", run_dir / KEPT
    with paused_gc():
        held = _read_kept(kept_path, results, whole) if kept_path.is_file() else None
        if held is not None:
            return held
        out = []
        for line in _lines(results):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            whole_node = not isinstance(r, dict) or r.get("node") in whole
            out.append(r if whole_node else kept(r))
    return out


BATCH = 2_000   # kept lines parsed as one JSON array: the decoder shares their keys


def _compact(record: dict) -> dict:
    """A kept record as publish holds it, 10,000 nodes' at once: its figures made now
    (their lists freed, their labels shared) and its devices' words shared (json.loads
    makes a new string of each; the keys are shared already, see _parsed)."""
    key_figures(record)
    data = record.get("data")
    devices = data.get("devices") if isinstance(data, dict) else None
    if type(devices) is list:
        for d in devices:  # the model's name and "cuda:0": the same on every node
            if type(d) is dict:
                for k in ("name", "device"):
                    v = d.get(k)
                    if type(v) is str and len(v) <= 64:
                        d[k] = sys.intern(v)
    return record


def _parsed(lines: list[str]) -> list | None:
    """A batch of JSON lines, parsed in one call (its decoder keeps one string of each
    key for the whole batch, where a call per line would make 60,000 of "device"); None
    when a line in it is not JSON."""
    try:
        out = json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        return None
    return out if len(out) == len(lines) else None  # "1,2" on one line is two values


def _kept_records(path: Path) -> Iterator[object]:
    """KEPT's lines parsed, a batch at a time; raises ValueError at a line that is not
    JSON (a torn last line: the caller falls back to results.jsonl)."""
    batch: list[str] = []
    for line in itertools.chain(_lines(path), [None]):
        if line is not None:
            batch.append(line)
            if len(batch) < BATCH:
                continue
        parsed = _parsed(batch)
        if parsed is None:  # find the bad line, keep what precedes it
            parsed = [json.loads(ln) for ln in batch]
        yield from parsed
        batch = []


def _read_kept(path: Path, results: Path, whole: set[str]) -> list[dict] | None:
    """KEPT's records, each node in `whole` given its whole record from results.jsonl,
    whose lines KEPT's follow one for one (metrics.prom lists its series in that order):
    the line numbers to parse are known from KEPT, and results.jsonl's other lines are
    only counted. None unless KEPT has a line for each of results.jsonl's, and each whole
    record is the node its kept line says (a run killed between the two appends, or
    files out of step, fall back to results.jsonl)."""
    out: list = []
    wanted: set[int] = set()  # results.jsonl's lines to parse, by number from 0
    try:
        for r in _kept_records(path):
            if isinstance(r, dict) and r.get("node") in whole:
                wanted.add(len(out))
                out.append(r)
            else:
                out.append(_compact(r) if isinstance(r, dict) else r)
    except ValueError:
        return None
    count = 0
    with open(results, "rb") as f:  # bytes: a line is decoded only when it is parsed
        for count, line in enumerate(f, 1):
            at = count - 1
            if at not in wanted:
                continue
            try:
                r = json.loads(line.decode("utf-8", "replace"))
            except ValueError:  # a torn line: its kept record, figures and all, stands in
                out[at] = _compact(out[at])
                continue
            if not isinstance(r, dict) or r.get("node") != out[at].get("node"):
                return None
            out[at] = r
    return out if count == len(out) else None


# The start of a results.jsonl line as the run writes it (ProbeOutcome.to_record): its
# node is read from here without parsing the line's document.
_LINE_NODE = re.compile(rb'^\{"run_id": "[^"\\]*", "node": ("(?:[^"\\]|\\.)*")')


def whole_records(results: Path, nodes: set[str]) -> Iterator[dict]:
    """The whole records of `nodes` in results.jsonl, one at a time, in the file's order:
    a line whose start names another node is skipped unparsed; a line whose start cannot
    be read so is parsed to be sure; a torn line is skipped."""
    with open(results, "rb") as f:
        for line in f:
            m = _LINE_NODE.match(line)
            if m is not None:
                try:
                    if json.loads(m.group(1)) not in nodes:
                        continue
                except ValueError:
                    pass
            try:
                r = json.loads(line.decode("utf-8", "replace"))
            except ValueError:
                continue
            if isinstance(r, dict) and r.get("node") in nodes:
                yield r


def key_figures(record: dict) -> list[Figure]:
    """The record's figures; none when the probe failed or the check is unknown. A record
    that does not have the shape its check declares yields none either (an old or
    doctored results.jsonl must not break a report)."""
    if "kept_figures" in record:
        return _kept_figures(record)
    spec = CHECKS.get(record.get("check", ""))
    if not record.get("ok") or spec is None or spec.figures is None:
        return []
    try:
        return [f for f in spec.figures(record) if isinstance(f.value, (int, float))]
    except (KeyError, TypeError, AttributeError, IndexError):
        return []


def _kept_figures(record: dict) -> list[Figure]:
    made = record.get("_figures")  # the page, the fleet and metrics.prom each ask: made once
    if made is None:
        made = record["_figures"] = _made_figures(record)
        record["kept_figures"] = record["kept_keys"] = record["kept_help"] = None  # as Figures
    return list(made)


_LABELS: dict[tuple, tuple] = {}  # a fleet's figures share a few dozen label sets: held once
_KEYS: dict[str, tuple] = {}      # kept_keys text -> its keys: a fleet's nodes share a few


def _made_figures(record: dict) -> tuple[Figure, ...]:
    keys, values = record.get("kept_keys"), record.get("kept_figures")
    if not isinstance(keys, str):  # a kept file from before kept_keys
        return _made_figures_v1(record)
    try:
        shape = _KEYS.get(keys) or _keys_of(keys)
        return tuple(Figure(m, labels, v, help_text, better) for (m, labels, better, help_text), v
                     in zip(shape, values or (), strict=True) if isinstance(v, (int, float)))
    except (TypeError, ValueError):  # a doctored line
        return ()


def _keys_of(text: str) -> tuple:
    """A kept_keys text's keys (metric, labels, better, help), checked; held for the next
    node that has them. ValueError or TypeError for a doctored one."""
    shape = tuple((m, _shared(tuple(tuple(p) for p in labels)), better, str(help_text))
                  for m, labels, better, help_text in json.loads(text))
    if not all(isinstance(k[0], str) and k[2] in ("higher", "lower") for k in shape):
        raise ValueError("a figure without a metric name")
    if len(_KEYS) < 4096:
        _KEYS[text] = shape
    return shape


def _made_figures_v1(record: dict) -> tuple[Figure, ...]:
    kept_help = record.get("kept_help")
    helps = kept_help if isinstance(kept_help, dict) else {}
    try:
        out = []
        for m, labels, v, better in record["kept_figures"]:
            if isinstance(v, (int, float)) and isinstance(m, str):
                out.append(Figure(m, _shared(tuple(tuple(p) for p in labels)), v,
                                  str(helps.get(m, m)), better))
        return tuple(out)
    except (TypeError, ValueError):  # a doctored line
        return ()


def _shared(pairs: tuple) -> tuple:
    try:
        return _LABELS.setdefault(pairs, pairs) if len(_LABELS) < 100_000 else pairs
    except TypeError:  # a label value that cannot be hashed: its own, then
        return pairs
