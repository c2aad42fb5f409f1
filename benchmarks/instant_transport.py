"""pytest plugin for benchmarks only: every local probe answers at once with a canned
document, so a run measures the controller alone (collection, dispatch, judging, reports,
the ledger). Load with `-p instant_transport` and benchmarks/ on PYTHONPATH.

BURNIN_INSTANT_DOCS names a JSON file {probe name: document}: controller_scale.py
captures them from a real run of every probe on this machine, so they fit each check's
schema as today's probes do. BURNIN_INSTANT_MODE says what every node answers:
  pass  the documents as captured (every node passes every check)
  fail  each document with a probe error (every node fails every check it runs)
  max   each document padded with a telemetry-like series of numbers to the most output
        the check allows (its max_output): the controller's worst case in memory
With BURNIN_INSTANT_MEET=1, an inter-node group's members meet as real ones do at their
rendezvous: each answers only once every rank of its group has arrived (at most
MEET_S), so that a group's members are running together, as the controller must hold
them (tests/test_controller_threads.py counts the threads that costs).
"""

from __future__ import annotations

import json
import os
import threading

from burnin.checks.train_job import job_id
from burnin.transports import CommandResult
from burnin.transports.local import LocalTransport

FAILURE = "benchmark: every node of this fleet fails (a fleet-wide bad rollout)"
_cache: dict[tuple[str, int], bytes] = {}
_lock = threading.Lock()
MEET_S = 30.0
_meeting = threading.Condition()
_arrived: dict[tuple[str, int], list[int]] = {}  # group: [ranks arrived, ranks left]


def answer(probe: str, max_stdout: int) -> bytes:
    """The bytes every node prints for `probe`, made once per probe."""
    key = (probe, max_stdout)
    with _lock:
        if key not in _cache:
            with open(os.environ["BURNIN_INSTANT_DOCS"], encoding="utf-8") as f:
                doc = json.load(f)[probe]
            mode = os.environ.get("BURNIN_INSTANT_MODE", "pass")
            if mode == "fail":
                doc["errors"] = [*doc["errors"], FAILURE]
            out = json.dumps(doc).encode()
            if mode == "max":
                # Numbers like a telemetry series, "71.25, " each: what a big probe
                # document is made of.
                room = max_stdout - len(out) - 64
                doc["figures"]["padding"] = [71.25] * max(0, room // len(b"71.25, "))
                out = json.dumps(doc).encode()
                assert len(out) <= max_stdout, (len(out), max_stdout)
            _cache[key] = out
        return _cache[key]


def _instant(self, argv, stdin, timeout_s, max_stdout, on_stderr=None, lifeline=False,
             cancel=None):
    probe = os.path.basename(argv[-1]).removesuffix(".py")
    out = answer(probe, max_stdout)
    if probe in ("allreduce", "collectives", "train") and b'"group"' in stdin:
        group = json.loads(stdin)["group"]
        if os.environ.get("BURNIN_INSTANT_MEET"):
            meet(group)
        out = as_train_member(out, group) if probe == "train" else as_member(out, group)
    return CommandResult(0, out, b"", 0.0)


def meet(group: dict) -> None:
    """Wait until every rank of this member's group has arrived (or MEET_S)."""
    key = (group["master_addr"], group["master_port"])
    with _meeting:
        seen = _arrived.setdefault(key, [0, 0])
        seen[0] += group["ranks_here"]
        _meeting.notify_all()
        _meeting.wait_for(lambda: seen[0] >= group["world"], MEET_S)
        seen[1] += group["ranks_here"]
        if seen[1] >= group["world"]:
            _arrived.pop(key, None)  # the group's last member has left


def as_member(out: bytes, group: dict) -> bytes:
    """An inter-node group member reports the layout the controller gave it (the
    controller checks it), with the captured figures."""
    doc = json.loads(out)
    doc["figures"].update(world=group["world"], first_rank=group["rank_offset"],
                          ranks_here=group["ranks_here"], mode="inter-node")
    # Every member keeps its sweep: the controller takes the group's busbw as the lowest
    # of its members' own (burnin/checks/group_outcomes.py: group_figures).
    return json.dumps(doc).encode()


def as_train_member(out: bytes, group: dict) -> bytes:
    """A train_internode member: its ranks numbered from the offset the controller gave
    it, in the job's world, each with the captured rank's figures and digest (as
    tests/support/replay.py answers for the same job)."""
    doc = json.loads(out)
    first, here = group["rank_offset"], group["ranks_here"]
    doc["devices"] = [dict(doc["devices"][0], rank=first + i) for i in range(here)]
    doc["figures"].update(world=group["world"], first_rank=first, ranks_here=here,
                          mode="inter-node")
    if isinstance(doc["figures"].get("job_spec"), dict):
        doc["figures"]["job_spec"]["world"] = group["world"]
        doc["figures"]["job"] = job_id(doc["figures"]["job_spec"])  # as the probe names it
    return json.dumps(doc).encode()


def pytest_configure(config) -> None:
    """Answer instantly only in the run that loads this plugin (`-p instant_transport`):
    an import alone (controller_scale.py's, a test's) must leave the local transport real,
    or every later test of that process would get canned documents."""
    LocalTransport.run = _instant  # type: ignore[method-assign]
