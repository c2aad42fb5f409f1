"""The probe protocol, controller side: run a probe on a node, and turn whatever happens
into a ProbeOutcome. Probe output is untrusted input: bounded, parsed, shape-checked.

A probe runs as `<python> probes/<name>.py`, reads its settings as one JSON object on
stdin, and prints one JSON object on stdout:

    {"probe": "<name>", "schema": 1, "node": {...identity...},
     "devices": [{...figures per device...}], "figures": {...}, "errors": ["..."]}
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

from burnin.core.safetext import UnsafeDocument, parse_document, safe_text
from burnin.model.nodes import Node
from burnin.model.verdict import clean
from burnin.probe.shapes import Num, Obj, Str
from burnin.transports import (
    WATCHDOG_S,
    CommandResult,
    Launcher,
    NodeBusy,
    NodeUnreachable,
    Transport,
    is_busy,
)
from burnin.transports.fanout import stand_aside

SCHEMA_VERSION = 1
# Bytes of JSON a probe may print, unless its check declares its own bound. Parsed, JSON
# grows up to ~36x (500-deep brackets), ~9x for numbers: the bound is the memory bound.
DEFAULT_MAX_OUTPUT = 4 << 20
# Documents parsed and shape-checked at once, whatever the fan-out: 256 nodes finishing
# together hold their raw output (bounded), but at most this many parsed trees.
PARSE_AT_ONCE = 2
_parsing = threading.BoundedSemaphore(PARSE_AT_ONCE)


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe run on one node came to. `data` is set only when ok."""

    node: str
    probe: str
    ok: bool
    reason: str = ""
    data: dict = field(default_factory=dict)
    duration_s: float = 0.0
    exit_code: int | None = None
    stderr_tail: str = ""
    busy: bool = False  # another run holds the node: not run, and not the node's fault
    # The controller failed while running it (a bug of ours, not anything the node did):
    # the run ends incomplete rather than blame the node (Run.verdict).
    fault: bool = False

    def to_record(self, run_id: str, check: str) -> dict:
        """The results.jsonl line of this outcome of `check` (whose probe may be another
        check's: the inter-node all-reduce runs the allreduce probe)."""
        record = {"run_id": run_id, "node": self.node, "check": check, "ok": self.ok,
                  "reason": self.reason, "duration_s": round(self.duration_s, 3),
                  "exit_code": self.exit_code, "stderr_tail": self.stderr_tail,
                  "data": self.data}
        if self.busy:
            record["busy"] = True
        if self.fault:
            record["controller_fault"] = True
        return record

    @classmethod
    def from_record(cls, record: dict) -> ProbeOutcome:
        return cls(node=record["node"], probe=record["check"], ok=record["ok"],
                   reason=record["reason"], data=record["data"] or {},
                   duration_s=record["duration_s"], exit_code=record["exit_code"],
                   stderr_tail=record["stderr_tail"], busy=bool(record.get("busy")),
                   fault=bool(record.get("controller_fault")))


def payload(check: str, node: Node, run_id: str, profile: str, gpus: int | None,
            settings: dict) -> dict:
    """What every probe reads on stdin about its run and its node; a check adds what is
    its own (health: the tools and baselines to look for; a group: its layout)."""
    out = {"check": check, "node": node.name, "run_id": run_id, "profile": profile,
           "gpus": gpus, "cpu_devices": node.cpu_devices, "gpu_model": node.gpu_model,
           "storage": {"path": node.storage.path, "mount": node.storage.mount},
           "settings": settings}
    if node.env:  # the probe sets these before torch, NCCL or gloo start
        out["env"] = dict(node.env)
    return out


def unreachable(node: str, probe: str, e: NodeUnreachable) -> ProbeOutcome:
    """The outcome of a node that could not be reached, or that another run holds."""
    return ProbeOutcome(node, probe, ok=False, reason=str(e), busy=isinstance(e, NodeBusy))


PROGRESS_MARK = b"BURNIN_PROGRESS "
MAX_PROGRESS_LINE = 4096


def run_probe(transport: Transport, probe: str, settings: dict, timeout_s: float,
              max_output: int = DEFAULT_MAX_OUTPUT, on_progress=None,
              schema=None, lifeline: bool = False, cancel=None) -> ProbeOutcome:
    """Run `probe` through `transport`; never raises for anything the node does.

    on_progress(dict) receives each 'BURNIN_PROGRESS {json}' line the probe writes to
    stderr (untrusted: a line that is not a small JSON object is ignored). With
    `lifeline`, the probe is asked to stop itself when it loses the controller.
    """
    node = transport.node.name
    on_stderr = _progress_lines(on_progress) if on_progress else None
    if lifeline:
        settings = {**settings, "watchdog_s": WATCHDOG_S}
    if not getattr(transport, "starts_together", False):
        stand_aside()  # the fan-out's other probes need not wait for this one to start
    try:
        argv = transport.probe_command(probe)
        result = transport.run(argv, json.dumps(settings).encode(), timeout_s, max_output,
                               on_stderr=on_stderr, lifeline=lifeline, cancel=cancel)
    except NodeUnreachable as e:
        return unreachable(node, probe, e)
    return judge_output(node, probe, result, timeout_s, max_output, schema)


def run_probes(launcher: Launcher, nodes: list, probe: str, payloads: dict[str, dict],
               timeouts: dict[str, float], max_output: int = DEFAULT_MAX_OUTPUT,
               on_progress: dict | None = None, schema=None, lifeline: bool = False,
               cancel=None, tasks: dict[str, int] | None = None) -> dict[str, list[ProbeOutcome]]:
    """run_probe() for many nodes at once, through a launcher that runs them as one (srun:
    one job step), `tasks[node]` tasks on a node (default one). Every task's output is
    judged on its own, exactly as run_probe judges a node's; a node that could not be
    reached gets one failed outcome."""
    stdins = {n.name: json.dumps({**payloads[n.name], "watchdog_s": WATCHDOG_S} if lifeline
                                 else payloads[n.name]).encode() for n in nodes}
    on_stderr = {name: _progress_lines(cb) for name, cb in (on_progress or {}).items()}
    stand_aside()  # its probes start as the launcher starts them (srun: one job step)
    results = launcher.run(nodes, probe, stdins, timeouts, max_output, on_stderr=on_stderr,
                           lifeline=lifeline, cancel=cancel, tasks=tasks)
    out = {}
    for n in nodes:
        r = results[n.name]
        out[n.name] = [ProbeOutcome(n.name, probe, ok=False, reason=r, busy=is_busy(r))] \
            if isinstance(r, str) else \
            [judge_output(n.name, probe, t, timeouts[n.name], max_output, schema) for t in r]
    return out


def judge_output(node: str, probe: str, result: CommandResult, timeout_s: float,
                 max_output: int, schema=None) -> ProbeOutcome:
    """Turn a finished command into an outcome: ok with data, or a failure with a reason."""
    stderr = safe_text(result.stderr_tail.decode("utf-8", "replace"))

    def failed(reason: str) -> ProbeOutcome:
        last = _last_line(stderr)
        if last and last not in reason:
            reason = f"{reason}; stderr: {last}"
        return ProbeOutcome(node, probe, False, reason, {}, result.duration_s,
                            result.exit_code, stderr)

    if result.cancelled:
        return failed(f"probe {probe} stopped: the run was interrupted")
    if result.unkilled:
        return failed(f"probe {probe} passed its timeout of {timeout_s:g} s and could not be "
                      f"killed: {result.unkilled}")
    if result.timed_out:
        return failed(f"probe {probe} killed at its timeout of {timeout_s:g} s")
    if result.overflow:
        return failed(f"probe {probe} printed more than {max_output} bytes; killed")
    if result.exit_code is not None and result.exit_code < 0:
        return failed(f"probe {probe} killed by signal {-result.exit_code}")
    if result.exit_code == 127:
        return failed(f"probe {probe} could not start: interpreter or probe not found "
                      f"(status 127)")
    if result.exit_code is not None and 128 < result.exit_code <= 128 + 64:  # as shells say
        return failed(f"probe {probe} killed by signal {result.exit_code - 128} "
                      f"(status {result.exit_code})")
    if result.exit_code != 0:
        return failed(f"probe {probe} exited with status {result.exit_code}")
    if len(result.stdout) > max_output:  # a transport that read past the bound it was given
        return failed(f"probe {probe} printed more than {max_output} bytes")
    with _parsing:  # a rejected document's tree is freed before the next parse starts
        data, problem = _read_document(probe, result.stdout, schema)
    if problem:
        if not result.stdout.strip():
            return failed(f"probe {probe} printed nothing on stdout")
        return failed(problem)
    return ProbeOutcome(node, probe, True, "", data, result.duration_s, 0, stderr)


def _read_document(probe: str, stdout: bytes, schema) -> tuple[dict, str]:
    """(document, '') when stdout is a document of the declared shape, else ({}, why)."""
    # Made safe here, where it is parsed: nothing after this point (judges, fleet
    # figures, the ledger, junit.xml, results.jsonl, metrics.prom) can meet text or
    # numbers from this node that it cannot encode or show.
    try:
        data = parse_document(stdout)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return {}, f"probe {probe} printed no valid JSON ({e})"
    except RecursionError:
        return {}, f"probe {probe} printed JSON nested too deeply to read"
    except UnsafeDocument as e:
        return {}, f"malformed probe output: {e}"
    problem = shape_problem(probe, data)
    if problem:
        return {}, f"probe {probe} output has the wrong shape: {problem}"
    problem = schema.problem(data, "") if schema is not None else ""
    if problem:
        return {}, f"malformed probe output: {problem}"
    return data, ""


def shape_problem(probe: str, data) -> str:
    """What is wrong with a probe document's shape, or '' when it is right."""
    if not isinstance(data, dict):
        return "expected a JSON object"
    if data.get("probe") != probe:
        return f"'probe' is {data.get('probe')!r}, expected {probe!r}"
    if data.get("schema") != SCHEMA_VERSION:
        return f"'schema' is {data.get('schema')!r}, expected {SCHEMA_VERSION}"
    expected = {"node": dict, "devices": list, "figures": dict, "errors": list}
    for key, kind in expected.items():
        if not isinstance(data.get(key), kind):
            return f"'{key}' should be a JSON {'object' if kind is dict else 'array'}"
    if not all(isinstance(d, dict) for d in data["devices"]):
        return "every entry of 'devices' should be a JSON object"
    if not all(isinstance(e, str) for e in data["errors"]):
        return "every entry of 'errors' should be a string"
    return ""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return clean(lines[-1][:300]) if lines else ""


PROGRESS = Obj(device=Str(64), elapsed_s=Num(0, 1e7), tflops=Num(0, 1e6),
               temp_c=Num(-300, 1000, null=True), required=("device",))


def _progress_lines(callback):
    """stderr chunks -> callback(info) for each well-formed progress line. A node's
    stderr is untrusted: a line that is not a small object of the declared figures
    (a string where a number belongs, 3,000 nested brackets) is dropped, never raised."""
    pending = bytearray()

    def feed(chunk: bytes) -> None:
        pending.extend(chunk)
        start = 0  # each byte is looked at once: a chunk of many lines costs its length
        while (end := pending.find(b"\n", start)) >= 0:
            line = bytes(pending[start:end]) if end - start < MAX_PROGRESS_LINE else b""
            start = end + 1
            if not line.startswith(PROGRESS_MARK):
                continue
            try:
                info = json.loads(line[len(PROGRESS_MARK):])
            except (ValueError, RecursionError):
                continue
            if not PROGRESS.problem(info, ""):
                callback(info)
        del pending[:start]
        if len(pending) > MAX_PROGRESS_LINE:
            pending.clear()
    return feed
