"""What an outside check's author tests with: the controller's own reading and judging of
a probe's document, without a run, and nodes whose probes answer with recorded documents.

- `outcome_of(check, document)`: the document read as a run reads a probe's stdout (its
  JSON made safe, its shape and the check's schema enforced): an ok ProbeOutcome, or a
  failed one with the reason a run would give.
- `verdicts(check, {node: document})`: every node's Verdict, as a run judges them: the
  check's fleet summary over all of them, then its judge on each, with its settings.
- `replay_python(path, documents)`: an executable to give nodes as their `python:` in a
  test inventory (`transport: local`): a probe that has a recorded document in the folder
  `documents` (<probe>.json) prints it instead of running; any other runs for real.
- `record(check, path)`: the check's probe run once for real on this machine (the local
  transport, as a run sends it), its document written to `path` for later replays.

Layer 12: may import every layer below it; nothing of burnin imports it.
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from burnin.checks import CHECKS, Check, Fleet, Judging
from burnin.engine.probe_files import probes_for
from burnin.engine.run import PROBES_DIR
from burnin.model.nodes import Node
from burnin.model.verdict import Verdict
from burnin.probe.protocol import ProbeOutcome, judge_output, payload, run_probe
from burnin.transports import CommandResult
from burnin.transports.local import LocalTransport


def _check(check: Check | str) -> Check:
    return check if isinstance(check, Check) else CHECKS[check]


def outcome_of(check: Check | str, document: dict | str | bytes,
               node: str = "n1") -> ProbeOutcome:
    """`document` (a dict, or a probe's stdout as text or bytes) as a run reads it."""
    c = _check(check)
    stdout = document if isinstance(document, bytes) else (
        document if isinstance(document, str) else json.dumps(document)).encode()
    result = CommandResult(0, stdout, b"", 0.0)
    return judge_output(node, c.probe_name, result, 60.0, c.max_output,
                        c.schema_for(c.resolve("quick"), None))


def verdicts(check: Check | str, documents: dict[str, Any], *, profile: str = "quick",
             settings: dict | None = None, devices: dict[str, int] | None = None,
             gpus: int | None = 0) -> dict[str, Verdict]:
    """{node: Verdict} of `check` over `documents` ({node: a document, or a ProbeOutcome}),
    judged together as one run judges its nodes: `settings` over the profile's defaults;
    `devices`, the devices each node must report (None: any); `gpus`, 0 for CPU nodes."""
    c = _check(check)
    resolved = c.resolve(profile, settings or {})
    outcomes = {n: d if isinstance(d, ProbeOutcome) else outcome_of(c, d, n)
                for n, d in documents.items()}
    fleet = c.summarize(Fleet(outcomes, dict(devices or {}))) if c.summarize else None
    return {n: c.judge(Node(n, n), o, Judging(resolved, fleet, None,
                                              (devices or {}).get(n), gpus))
            for n, o in outcomes.items()}


REPLAY = '''\
import json, os, sys
probe = sys.argv[1]
recorded = os.path.join({folder!r}, os.path.basename(probe)[:-3] + ".json")
if not os.path.exists(recorded) or "-h" in sys.argv or "--help" in sys.argv:
    os.execv(sys.executable, [sys.executable] + sys.argv[1:])
sys.stdin.readline()  # the controller's settings line; the lifeline is left unread
with open(recorded) as f:
    sys.stdout.write(json.dumps(json.load(f)) + "\\n")
sys.stdout.flush()
os._exit(0)
'''


def replay_python(path: Path, documents: Path, python: str = sys.executable) -> str:
    """Write, at `path`, an executable for a node's `python:` whose probes answer with
    the documents recorded in the folder `documents` (<probe>.json; record() writes one);
    a probe without one runs for real under `python`. Returns its path."""
    path = Path(path)
    code = REPLAY.format(folder=str(Path(documents).resolve()))
    path.write_text(f"#!/bin/sh\nexec {shlex.quote(python)} -c {shlex.quote(code)} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def record(check: Check | str, path: Path | None = None, *, profile: str = "quick",
           settings: dict | None = None, gpus: int = 0,
           python: str = sys.executable) -> ProbeOutcome:
    """Run the check's probe once on this machine, as a run on a `transport: local` node
    with `gpus` GPUs sends it, and (with `path`, when it measured) write its document
    there for replay_python. Returns its outcome."""
    c = _check(check)
    resolved = c.resolve(profile, settings or {})
    probes = probes_for(PROBES_DIR, [*CHECKS.values(), c])
    with tempfile.TemporaryDirectory(prefix="burnin-record-") as work:
        node = Node("here", "localhost", transport="local", gpus=gpus, python=python,
                    workdir=work)
        transport = LocalTransport(node, probes, "record")
        try:
            out = run_probe(transport, c.probe_name,
                            payload(c.name, node, "record", profile, gpus, resolved),
                            float(resolved["timeout_s"]), c.output_limit(resolved, gpus),
                            schema=c.schema_for(resolved, gpus))
        finally:
            transport.close()
    if path is not None and out.ok:
        Path(path).write_text(json.dumps(out.data))
    return out


__all__ = ["outcome_of", "record", "replay_python", "verdicts"]
