"""pytest plugin for benchmarks only: every local probe answers at once with a canned
health document, so a run measures the controller alone (collection, dispatch, judging,
reports). Load with `-p instant_transport` and benchmarks/ on PYTHONPATH."""

import json

from burnin.transports import CommandResult
from burnin.transports.local import LocalTransport

DOC = {"probe": "health", "schema": 1, "devices": [], "errors": [],
       "figures": {"torch": {"present": True, "version": "2.13.0"},
                   "gpu": {"nvml": "absent", "reason": "benchmark"}}}


def _instant(self, argv, stdin, timeout_s, max_stdout):
    doc = {**DOC, "node": {"hostname": self.node.name}}
    return CommandResult(0, json.dumps(doc).encode(), b"", 0.0)


LocalTransport.run = _instant
