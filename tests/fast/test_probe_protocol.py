"""burnin/probe/protocol.py in-process: whatever a node's command came to becomes one outcome, and
a document is parsed, made safe and shape-checked before anyone reads it. (The probe
runner against real misbehaving processes: tests/test_probe_runner.py.)"""

from __future__ import annotations

import json

import pytest

from burnin.model.nodes import Node
from burnin.probe.protocol import (
    DEFAULT_MAX_OUTPUT,
    MAX_PROGRESS_LINE,
    ProbeOutcome,
    _progress_lines,
    judge_output,
    run_probe,
    run_probes,
    shape_problem,
    unreachable,
)
from burnin.probe.shapes import Int, List, Obj
from burnin.transports import WATCHDOG_S, CommandResult, NodeBusy, NodeUnreachable

DOC = {"probe": "p", "schema": 1, "node": {"host": "n1"}, "devices": [{"x": 1}],
       "figures": {"f": 1.5}, "errors": []}


def out(stdout: bytes | str = b"", exit_code: int | None = 0, stderr: bytes = b"", **kw):
    if isinstance(stdout, str):
        stdout = stdout.encode()
    return CommandResult(exit_code, stdout, stderr, 2.5, **kw)


def judged(result: CommandResult, schema=None, max_output=1000) -> ProbeOutcome:
    return judge_output("n1", "p", result, 30, max_output, schema)


def test_a_good_document_is_the_outcome(tmp_path):
    o = judged(out(json.dumps(DOC), stderr=b"log line\n"))
    assert o == ProbeOutcome("n1", "p", True, "", DOC, 2.5, 0, "log line\n")
    exact = json.dumps(DOC).encode()
    exact += b" " * (1000 - len(exact))
    assert judged(out(exact)).ok, "a document of exactly max_output bytes is within bounds"


@pytest.mark.parametrize("result,reason", [
    (out(cancelled=True, exit_code=None), "probe p stopped: the run was interrupted"),
    (out(unkilled="pid 7 in D state", timed_out=True, exit_code=None),
     "probe p passed its timeout of 30 s and could not be killed: pid 7 in D state"),
    (out(timed_out=True, exit_code=None), "probe p killed at its timeout of 30 s"),
    (out(overflow=True, exit_code=None), "probe p printed more than 1000 bytes; killed"),
    (out(json.dumps(DOC), exit_code=-9), "probe p killed by signal 9"),
    (out(exit_code=127), "probe p could not start: interpreter or probe not found (status 127)"),
    (out(exit_code=137), "probe p killed by signal 9 (status 137)"),
    (out(exit_code=129), "probe p killed by signal 1 (status 129)"),
    (out(exit_code=192), "probe p killed by signal 64 (status 192)"),
    (out(exit_code=193), "probe p exited with status 193"),
    (out(exit_code=128), "probe p exited with status 128"),
    (out(json.dumps(DOC), exit_code=3), "probe p exited with status 3"),
    (out(json.dumps(DOC), exit_code=None), "probe p exited with status None"),
    (out(b"x" * 1001), "probe p printed more than 1000 bytes"),
    (out(b""), "probe p printed nothing on stdout"),
    (out(b" \n"), "probe p printed nothing on stdout"),
    (out(b"not json"), "probe p printed no valid JSON (Expecting value: line 1 column 1 "
                       "(char 0))"),
    (out(b"\xff{"), "probe p printed no valid JSON ('utf-8' codec can't decode byte 0xff in "
                    "position 0: invalid start byte)"),
    (out(b"[" * 40 + b"]" * 40), "malformed probe output: nested deeper than 32 levels"),
    (out(b'{"tflops": NaN}'), "malformed probe output: a number that is not finite (nan)"),
    (out(b"[1]"), "probe p output has the wrong shape: expected a JSON object"),
])
def test_every_way_a_probe_can_go_wrong_is_a_failure_with_its_reason(result, reason):
    o = judged(result)
    assert o == ProbeOutcome("n1", "p", False, reason, {}, 2.5, result.exit_code, "")


def test_json_nested_past_the_recursion_limit_is_a_reason_not_a_crash():
    deep = out(b"[" * 100_000 + b"]" * 100_000)
    assert judged(deep, max_output=1 << 20).reason == \
        "probe p printed JSON nested too deeply to read"


def test_the_last_line_of_stderr_is_added_to_the_reason_once():
    o = judged(out(exit_code=3, stderr=b"starting\nboom: disk on fire  \n\n"))
    assert o.reason == "probe p exited with status 3; stderr: boom: disk on fire"
    assert o.stderr_tail == "starting\nboom: disk on fire  \n\n"
    same = judged(out(exit_code=127, stderr=b"probe p could not start"))
    assert same.reason == "probe p could not start: interpreter or probe not found (status 127)"
    long = judged(out(exit_code=3, stderr=b"y" * 500 + b"\x1b[2J"))
    assert long.reason == "probe p exited with status 3; stderr: " + "y" * 300
    odd = judged(out(exit_code=3, stderr=b"\xff\x1b[2J gone"))
    assert odd.reason == "probe p exited with status 3; stderr: \ufffd\\x1b[2J gone"
    assert odd.stderr_tail == "\ufffd\\x1b[2J gone"


def test_a_document_that_does_not_fit_its_schema_fails_with_the_field():
    schema = Obj(devices=List(Obj(x=Int(0, 0))))
    o = judged(out(json.dumps(DOC)), schema=schema)
    assert (o.ok, o.reason) == (False, "malformed probe output: devices[0].x: expected an "
                                       "integer from 0 to 0, got 1")
    assert judged(out(json.dumps(DOC)), schema=Obj(devices=List(Obj(x=Int())))).ok


def test_a_document_with_too_many_keys_is_named_from_its_root():
    schema = Obj(max_keys=8)
    doc = {**DOC, **{f"k{i}": i for i in range(3)}}
    assert judged(out(json.dumps(doc)), schema=schema).reason == \
        "malformed probe output: : 9 keys, at most 8 expected"


def test_text_in_a_document_is_made_safe_where_it_is_parsed():
    doc = {**DOC, "errors": ["GPU \x1b[2J\ud800"], "node": {"h\u202e": "x\ny"}}
    o = judged(out(json.dumps(doc)))
    assert o.data["errors"] == ["GPU \\x1b[2J\ufffd"]
    assert o.data["node"] == {"h\\u202e": "x\\x0ay"}


@pytest.mark.parametrize("doc,problem", [
    ([], "expected a JSON object"),
    ({**DOC, "probe": "q"}, "'probe' is 'q', expected 'p'"),
    ({k: v for k, v in DOC.items() if k != "probe"}, "'probe' is None, expected 'p'"),
    ({**DOC, "schema": 2}, "'schema' is 2, expected 1"),
    ({**DOC, "schema": "1"}, "'schema' is '1', expected 1"),
    ({**DOC, "node": []}, "'node' should be a JSON object"),
    ({**DOC, "devices": {}}, "'devices' should be a JSON array"),
    ({**DOC, "figures": None}, "'figures' should be a JSON object"),
    ({**DOC, "errors": "e"}, "'errors' should be a JSON array"),
    ({**DOC, "devices": [{}, 1]}, "every entry of 'devices' should be a JSON object"),
    ({**DOC, "errors": ["e", 2]}, "every entry of 'errors' should be a string"),
    (DOC, ""),
])
def test_shape_problem(doc, problem):
    assert shape_problem("p", doc) == problem


def test_records_round_trip_and_mark_busy_and_controller_faults():
    o = ProbeOutcome("n1", "p", True, "", DOC, 1.23456, 0, "tail")
    rec = o.to_record("run-1", "p")
    assert rec == {"run_id": "run-1", "node": "n1", "check": "p", "ok": True, "reason": "",
                   "duration_s": 1.235, "exit_code": 0, "stderr_tail": "tail", "data": DOC}
    assert ProbeOutcome.from_record(rec) == ProbeOutcome("n1", "p", True, "", DOC, 1.235, 0,
                                                         "tail")
    busy = ProbeOutcome("n1", "p", False, "busy: r2", busy=True, fault=True).to_record("r", "p")
    assert busy["busy"] is True and busy["controller_fault"] is True
    assert ProbeOutcome.from_record(busy) == ProbeOutcome("n1", "p", False, "busy: r2",
                                                          busy=True, fault=True)
    empty = {**rec, "data": None}
    assert ProbeOutcome.from_record(empty).data == {}


def test_a_records_check_is_the_checks_whatever_probe_it_ran():
    # The inter-node all-reduce runs the allreduce probe: its records are its own.
    o = ProbeOutcome("n1", "allreduce", True, "", DOC)
    assert o.to_record("r", "allreduce_internode")["check"] == "allreduce_internode"


def test_an_unreachable_node_fails_and_a_busy_one_is_marked_busy():
    assert unreachable("n1", "p", NodeUnreachable("no route")) == \
        ProbeOutcome("n1", "p", False, "no route")
    busy = unreachable("n1", "p", NodeBusy("held by run r2"))
    assert busy == ProbeOutcome("n1", "p", False, "busy: held by run r2", busy=True)


class FakeTransport:
    def __init__(self, result=None, error=None):
        self.node = Node("n1", "n1")
        self.result, self.error, self.calls = result, error, []

    def probe_command(self, probe):
        if self.error:
            raise self.error
        return ["python3", f"probes/{probe}.py"]

    def run(self, argv, stdin, timeout_s, max_output, **kw):
        self.calls.append((argv, json.loads(stdin), timeout_s, max_output, kw))
        return self.result


def test_run_probe_sends_the_settings_and_judges_what_came_back():
    t = FakeTransport(out(json.dumps(DOC)))
    cancel = object()
    o = run_probe(t, "p", {"n": 64}, 30, max_output=5000, schema=Obj(), cancel=cancel)
    assert o == ProbeOutcome("n1", "p", True, "", DOC, 2.5, 0, "")
    argv, stdin, timeout_s, max_output, kw = t.calls[0]
    assert (argv, stdin, timeout_s, max_output) == (["python3", "probes/p.py"], {"n": 64}, 30,
                                                    5000)
    assert kw == {"on_stderr": None, "lifeline": False, "cancel": cancel}
    o = run_probe(t, "p", {"n": 64}, 30, max_output=10, lifeline=True)
    assert o.reason == "probe p printed more than 10 bytes"
    assert t.calls[1][1] == {"n": 64, "watchdog_s": WATCHDOG_S} and t.calls[1][4]["lifeline"]
    assert t.calls[1][3] == 10
    run_probe(t, "p", {}, 30)
    assert t.calls[2][3] == DEFAULT_MAX_OUTPUT


def test_run_probe_judges_with_the_timeout_and_schema_it_was_given():
    t = FakeTransport(out(timed_out=True, exit_code=None))
    assert run_probe(t, "p", {}, 12).reason == "probe p killed at its timeout of 12 s"
    t = FakeTransport(out(json.dumps(DOC)))
    assert run_probe(t, "p", {}, 12, schema=Obj(required=("absent",))).reason == \
        "malformed probe output: absent: missing"


def test_run_probe_passes_progress_lines_to_the_callback():
    seen = []
    t = FakeTransport(out(json.dumps(DOC)))
    run_probe(t, "p", {}, 30, on_progress=seen.append)
    t.calls[0][4]["on_stderr"](b'BURNIN_PROGRESS {"device": "cpu"}\n')
    assert seen == [{"device": "cpu"}]


def test_run_probe_turns_an_unreachable_node_into_its_outcome():
    o = run_probe(FakeTransport(error=NodeBusy("held")), "p", {}, 30)
    assert o == ProbeOutcome("n1", "p", False, "busy: held", busy=True)


class FakeLauncher:
    def __init__(self, results):
        self.results, self.calls = results, []

    def run(self, nodes, probe, stdins, timeouts, max_output, **kw):
        self.calls.append(({k: json.loads(v) for k, v in stdins.items()}, timeouts, max_output,
                           kw))
        self.nodes, self.probe = [n.name for n in nodes], probe
        return self.results


def test_run_probes_judges_every_task_of_every_node():
    nodes = [Node("n1", "n1"), Node("n2", "n2"), Node("n3", "n3")]
    doc2 = {**DOC, "figures": {"f": 2}}
    launcher = FakeLauncher({"n1": [out(json.dumps(DOC)), out(json.dumps(doc2))],
                             "n2": "srun: node n2 is down", "n3": "busy: held by r2"})
    seen = []
    got = run_probes(launcher, nodes, "p", {n.name: {"i": i} for i, n in enumerate(nodes)},
                     {"n1": 10, "n2": 20, "n3": 30}, max_output=4000,
                     on_progress={"n1": seen.append}, tasks={"n1": 2}, lifeline=True)
    assert got["n1"] == [ProbeOutcome("n1", "p", True, "", DOC, 2.5, 0, ""),
                         ProbeOutcome("n1", "p", True, "", doc2, 2.5, 0, "")]
    assert (launcher.nodes, launcher.probe) == (["n1", "n2", "n3"], "p")
    assert got["n2"] == [ProbeOutcome("n2", "p", False, "srun: node n2 is down")]
    assert got["n3"] == [ProbeOutcome("n3", "p", False, "busy: held by r2", busy=True)]
    stdins, timeouts, max_output, kw = launcher.calls[0]
    assert stdins == {"n1": {"i": 0, "watchdog_s": WATCHDOG_S},
                      "n2": {"i": 1, "watchdog_s": WATCHDOG_S},
                      "n3": {"i": 2, "watchdog_s": WATCHDOG_S}}
    assert (timeouts, max_output) == ({"n1": 10, "n2": 20, "n3": 30}, 4000)
    assert kw["tasks"] == {"n1": 2} and kw["lifeline"] is True and kw["cancel"] is None
    kw["on_stderr"]["n1"](b'BURNIN_PROGRESS {"device": "cpu:0"}\n')
    assert seen == [{"device": "cpu:0"}] and list(kw["on_stderr"]) == ["n1"]


def test_run_probes_passes_the_cancel_event_and_judges_with_each_nodes_timeout():
    cancel = object()
    launcher = FakeLauncher({"n1": [out(timed_out=True, exit_code=None)]})
    got = run_probes(launcher, [Node("n1", "n1")], "p", {"n1": {}}, {"n1": 7}, cancel=cancel)
    assert got["n1"][0].reason == "probe p killed at its timeout of 7 s"
    assert launcher.calls[0][3]["cancel"] is cancel


def test_run_probes_without_lifeline_sends_the_payload_as_it_is():
    launcher = FakeLauncher({"n1": [out(json.dumps(DOC), exit_code=3)]})
    got = run_probes(launcher, [Node("n1", "n1")], "p", {"n1": {"i": 0}}, {"n1": 10})
    assert got["n1"][0].reason == "probe p exited with status 3"
    stdins, _, max_output, kw = launcher.calls[0]
    assert stdins == {"n1": {"i": 0}} and max_output == DEFAULT_MAX_OUTPUT
    assert kw == {"on_stderr": {}, "lifeline": False, "cancel": None, "tasks": None}
    judged_schema = run_probes(FakeLauncher({"n1": [out(json.dumps(DOC))]}),
                               [Node("n1", "n1")], "p", {"n1": {}}, {"n1": 10},
                               schema=Obj(required=("absent",)))
    assert judged_schema["n1"][0].reason == "malformed probe output: absent: missing"


def test_progress_lines_are_taken_whole_and_only_when_well_formed():
    seen = []
    feed = _progress_lines(seen.append)
    feed(b'BURNIN_PROGRESS {"device": "cpu:0", "tfl')
    assert seen == []
    feed(b'ops": 1.5, "elapsed_s": 2}\nnoise\nBURNIN_PROGRESS {"device": "cpu:1"}\n')
    assert seen == [{"device": "cpu:0", "tflops": 1.5, "elapsed_s": 2}, {"device": "cpu:1"}]
    seen.clear()
    feed(b'BURNIN_PROGRESS {"device": "cpu", "tflops": "fast"}\n')       # a wrong type
    feed(b"BURNIN_PROGRESS " + b"[" * 3000 + b"\n")                        # too deep
    feed(b'BURNIN_PROGRESS {"tflops": 1}\n')                               # no device
    feed(b'BURNIN_PROGRESS not json\n')
    feed(b'burnin_progress {"device": "cpu"}\n')
    feed(b'x BURNIN_PROGRESS {"device": "cpu"}\n')
    feed(b'BURNIN_PROGRESS {"device": "cpu", "temp_c": null, "elapsed_s": 0}\n')
    assert seen == [{"device": "cpu", "temp_c": None, "elapsed_s": 0}]
    seen.clear()
    # In one chunk: an empty line first, a bad one between, and each good one is taken.
    feed(b'\nBURNIN_PROGRESS {"device": "a"}\nBURNIN_PROGRESS {bad\n'
         b'BURNIN_PROGRESS {"device": "b"}\n')
    assert seen == [{"device": "a"}, {"device": "b"}]


def test_a_progress_line_too_long_is_dropped_and_the_buffer_stays_bounded():
    seen = []
    feed = _progress_lines(seen.append)
    pad = " " * (MAX_PROGRESS_LINE - len(b'BURNIN_PROGRESS {"device": "a"}'))
    feed(f'BURNIN_PROGRESS {{"device": "a"}}{pad[:-1]}\n'.encode())   # 4095 bytes: kept
    assert seen == [{"device": "a"}]
    feed(f'BURNIN_PROGRESS {{"device": "b"}}{pad}\n'.encode())        # 4096 bytes: dropped
    assert seen == [{"device": "a"}]
    feed(b"BURNIN_PROGRESS " + b" " * (MAX_PROGRESS_LINE + 10))      # no newline: cleared
    feed(b'{"device": "c"}\nBURNIN_PROGRESS {"device": "d"}\n')
    assert seen == [{"device": "a"}, {"device": "d"}]
    # A partial line of exactly the bound is kept: what follows is its tail, not a line.
    feed(b"x" * MAX_PROGRESS_LINE)
    feed(b'BURNIN_PROGRESS {"device": "tail"}\nBURNIN_PROGRESS {"device": "e"}\n')
    assert seen[-1] == {"device": "e"} and {"device": "tail"} not in seen


def test_every_probe_reads_its_run_and_its_node_from_one_payload():
    from burnin.model.nodes import StorageSettings
    from burnin.probe.protocol import payload
    node = Node("n1", "10.0.0.1", gpus=8, gpu_model="H100", cpu_devices=2,
                storage=StorageSettings("/data", "/data"), env={"NCCL_IB_HCA": "mlx5"})
    assert payload("burn", node, "r1", "quick", 8, {"seconds": 60}) == {
        "check": "burn", "node": "n1", "run_id": "r1", "profile": "quick", "gpus": 8,
        "cpu_devices": 2, "gpu_model": "H100", "storage": {"path": "/data", "mount": "/data"},
        "settings": {"seconds": 60}, "env": {"NCCL_IB_HCA": "mlx5"}}
    assert "env" not in payload("burn", Node("n2", "n2"), "r1", "quick", None, {})
