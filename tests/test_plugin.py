"""The plugin end to end through pytester: the real suites/ against local nodes."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET

import pytest
from support.replay import replay_python
from support.suiterun import CHECKS, SUITES, junit_cases, run_suite, script

import burnin


def inventory(pytester: pytest.Pytester, body: str, name: str = "inv.yaml") -> str:
    path = pytester.path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


THREE = """\
    version: 1
    cluster: trio
    defaults: {transport: local, gpus: 0}
    checks:
      sdc: {duration_s: 0.2, n: 64, random_repeats: 2}
      memory: {host_bytes: 65536, retention_s: 0.2}
      # Three 'nodes' share this machine's cores: peers are not independent here.
      burn: {duration_s: 0.5, n: 128, sample_s: 0.25, peer_fraction: 0}
      storage: {size_gb: 0.02, streams: 2, stream_fraction: 0}
      allreduce: {max_bytes: 262144, seconds_per_size: 0.02, peer_fraction: 0,
                  pair_fraction: 0}
      collectives: {min_bytes: 65536, max_bytes: 262144, seconds_per_size: 0.02}
      collectives_internode: {pair_fraction: 0}
      train: {steps: 6, warmup_steps: 2, d_model: 32, layers: 1, heads: 2, seq_len: 16,
              vocab: 64, batch: 4, gemm_n: 64, gemm_s: 0.05, lr: 0.01, peer_fraction: 0,
              straggler_fraction: 0}
    nodes:
      - name: n[1-3]
        address: 127.0.0.[1-3]
    """
ALL = {c: ("passed", "") for c in CHECKS}


def replayed(pytester: pytest.Pytester, body: str = THREE) -> str:
    """An inventory whose nodes replay the real probes' recorded documents
    (tests/support/replay.py): for what the plugin does with them.
    test_three_local_nodes_... runs the real probes."""
    py = replay_python(pytester.path / "replay")
    ours = f"defaults: {{transport: local, gpus: 0, python: {py}}}"
    return inventory(pytester, body.replace("defaults: {transport: local, gpus: 0}", ours))


def test_three_local_nodes_give_three_testsuites(pytester):
    # n1 runs every real probe; n2 and n3 replay theirs but the inter-node all-reduce,
    # collectives and train job (their groups move real data between all three): the real
    # probes' cost once, not three times.
    py = replay_python(pytester.path / "replay",
                       real_in_groups=("allreduce", "collectives", "train"))
    body = THREE.replace("      - name: n[1-3]\n        address: 127.0.0.[1-3]\n",
                         "      - {name: n1, address: 127.0.0.1}\n"
                         f"      - {{name: n2, address: 127.0.0.2, python: {py}}}\n"
                         f"      - {{name: n3, address: 127.0.0.3, python: {py}}}\n")
    assert body != THREE
    result, reports = run_suite(pytester, inventory(pytester, body), "-v")
    result.assert_outcomes(passed=36)
    result.stdout.fnmatch_lines(["*test_health.py::test_health[[]n1[]] PASSED*",
                                 "*test_health.py::test_health[[]n3[]] PASSED*",
                                 "*test_sdc.py::test_sdc[[]n3[]] PASSED*",
                                 "*burn n1: * TFLOPS over 1 device(s)*",
                                 "*test_burn.py::test_burn[[]n3[]] PASSED*",
                                 "*3 nodes tested, 3 passed every check, 0 did not*"])
    assert junit_cases(reports) == {n: ALL for n in ("n1", "n2", "n3")}
    root = ET.parse(reports / "latest" / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert suite.get("hostname") == "127.0.0.1"  # the node's address
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    run_id = (reports / "latest").readlink().name
    every = ",".join(CHECKS)
    # No relative speed and no price: three nodes are fewer than the five voters a fleet
    # median needs (burnin/goodput.py), so one node's figure would set another's speed.
    assert "relative_speed" not in props and "goodput_job_nodes" not in props
    assert props == {"cluster": "trio", "run_id": run_id, "burnin_report": "1",
                     "burnin_version": burnin.__version__, "profile": "standard",
                     "complete": "true", "exit_status": "0", "nodes_in_run": "3",
                     "requested_checks": every, "gpus": "0", "equipped_checks": "",
                     "applicable_checks": every}
    records = [json.loads(ln) for ln in (reports / run_id / "results.jsonl").read_text()
               .splitlines()]
    assert sorted((r["check"], r["node"]) for r in records) == [
        (c, n) for c in sorted(CHECKS) for n in ("n1", "n2", "n3")]
    assert all(r["ok"] and r["data"]["probe"] == r["check"].split("_")[0] for r in records)


def test_xdist_gives_the_same_verdicts_and_runs_each_probe_once(pytester):
    inv = replayed(pytester, THREE.replace("nodes:\n", "nodes:\n      - name: bad\n"
                                                        "        python: /nonexistent/py\n"))
    # Dry runs: the first would otherwise quarantine 'bad' and the second skip it.
    serial, serial_reports = run_suite(pytester, inv, "-k", "health", "--no-quarantine")
    parallel, parallel_reports = run_suite(pytester, inv, "-k", "health", "--no-quarantine",
                                           "-n", "3")
    serial.assert_outcomes(passed=3, failed=1)
    parallel.assert_outcomes(passed=3, failed=1)
    assert junit_cases(serial_reports) == junit_cases(parallel_reports)
    run_dir = (parallel_reports / "latest").resolve()
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    assert len(lines) == 4, "three workers must share one execution of the probe"


def test_a_failing_node_fails_alone_with_its_reason(pytester):
    # Only the hung node gets a short timeout (a node group's own `checks:`): healthy
    # probes keep the profile's, so a slow or busy machine cannot fail them.
    inv = inventory(pytester, """\
        version: 1
        defaults: {transport: local, gpus: 0}
        nodes:
          - name: n[1-2]
          - name: nopython
            python: /nonexistent/python3
          - name: hangs
            python: {hang}
            checks: {health: {timeout_s: 3}}
          - name: gpuless
            gpus: 2
        """.replace("{hang}", str(hang_script(pytester))))
    result, reports = run_suite(pytester, inv, "-k", "health")
    result.assert_outcomes(passed=2, failed=3)
    cases = junit_cases(reports)
    assert cases["n1"]["health"] == ("passed", "")
    assert cases["n2"]["health"] == ("passed", "")
    outcome, message = cases["nopython"]["health"]
    assert outcome == "failure" and "interpreter or probe not found" in message
    outcome, message = cases["hangs"]["health"]
    assert outcome == "failure" and "killed at its timeout of 3 s" in message
    outcome, message = cases["gpuless"]["health"]
    assert outcome == "failure" and "inventory says 2 GPUs, but NVML is absent" in message
    result.stdout.fnmatch_lines(["*5 nodes tested, 2 passed every check, 3 did not*"])


def hang_script(pytester: pytest.Pytester) -> str:
    return script(pytester.path / "hang.sh", "sleep 600\n")


def test_bad_inventory_is_a_usage_error_before_any_node_is_touched(pytester):
    inv = inventory(pytester, "version: 1\nnodes:\n  - name: n1\n    transport: lcoal\n")
    for extra in ((), ("-n", "2")):
        result, reports = run_suite(pytester, inv, *extra)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*{inv}:4: nodes[[]0[]].transport: expected one of*"])
        assert "Traceback" not in result.stdout.str() + result.stderr.str()
        assert not reports.exists()


def test_nodes_option_selects_a_subset_and_rejects_strangers(pytester):
    inv = replayed(pytester)
    result, reports = run_suite(pytester, inv, "--nodes", "n[1,3]", "-k", "health")
    result.assert_outcomes(passed=2)
    assert sorted(junit_cases(reports)) == ["n1", "n3"]
    result, _ = run_suite(pytester, inv, "--nodes", "n[3-4]")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--nodes names nodes not in*: n4*"])


def test_pytest_options_keep_working(pytester):
    inv = replayed(pytester)
    own = pytester.path / "own.xml"
    result, reports = run_suite(pytester, inv, "-k", "health and n2", f"--junitxml={own}")
    result.assert_outcomes(passed=1)
    # Deselected nodes keep a testsuite with no testcase: admission will not pass them.
    assert junit_cases(reports) == {"n1": {}, "n2": {"health": ("passed", "")}, "n3": {}}
    assert 'name="test_health[n2]"' in own.read_text()


def test_a_single_node_has_no_internode_testcase_and_is_admitted(pytester):
    inv = replayed(pytester, THREE.replace("n[1-3]", "n1").replace("127.0.0.[1-3]",
                                                                    "127.0.0.1"))
    result, reports = run_suite(pytester, inv, "-k", "allreduce")
    result.assert_outcomes(passed=1, deselected=None)
    assert junit_cases(reports) == {"n1": {"allreduce": ("passed", "")}}


def test_default_inventory_is_localhost(pytester):
    # Run from the repo's rootdir with no --inventory: inventories/localhost.yaml.
    reports = pytester.path / "reports"
    result = pytester.runpytest(SUITES, "--reports", str(reports), "-p", "no:cacheprovider",
                                "-k", "health")
    result.assert_outcomes(passed=1)
    assert junit_cases(reports) == {"localhost": {"health": ("passed", "")}}


def test_plugin_stays_dormant_without_burnin_tests(pytester):
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert not [ln for ln in result.outlines if ln.strip("= ") == "burnin"]
    assert not (pytester.path / "reports").exists()


AUTO = """\
    version: 1
    defaults: {transport: local, gpus: auto, python: {gpu}}
    checks:
      memory: {host_bytes: 1048576, retention_s: 0.2}
      pcie: {seconds: 0.3, block_mb: 4, peer_fraction: 0}
    nodes:
      - name: cpu
        python: {cpu}
      - name: gpu
    """


def auto_nodes(pytester: pytest.Pytester, nvml) -> str:
    """Two `gpus: auto` nodes: 'gpu' has two (emulated) GPUs, 'cpu' has none (its python
    sees neither the NVML emulator nor emulated CUDA). Their health probes are real (they
    count the GPUs); the memory and pcie probes replay recorded documents shaped to the
    count the controller learnt (tests/support/replay.py): what is collected is tested."""
    nvml(devices=[{"uuid": "GPU-a"}, {"uuid": "GPU-b"}])
    gpu = replay_python(pytester.path / "replay", real=("health",))
    cpu = script(pytester.path / "python-cpu", "unset BURNIN_NVML_SCENARIO BURNIN_EMULATE_CUDA\n"
                 f"exec {gpu} \"$@\"\n")
    return inventory(pytester, AUTO.replace("{cpu}", cpu).replace("{gpu}", gpu))


def health_runs(reports) -> list[str]:
    return [json.loads(ln)["node"] for ln in (reports / "latest" / "results.jsonl").open()
            if json.loads(ln)["check"] == "health"]


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_auto_nodes_learn_their_gpus_before_gpu_only_checks_are_collected(pytester, nvml,
                                                                          xdist):
    inv = auto_nodes(pytester, nvml)
    result, reports = run_suite(pytester, inv, "-k", "health or pcie or memory", *xdist)
    result.assert_outcomes(passed=5, deselected=None)
    passed = ("passed", "")
    assert junit_cases(reports) == {"cpu": {"health": passed, "memory": passed},
                                    "gpu": {"health": passed, "pcie": passed,
                                            "memory": passed}}
    assert sorted(health_runs(reports)) == ["cpu", "gpu"], "health runs once per node"
    root = ET.parse(reports / "latest" / "junit.xml").getroot()
    props = {s.get("name"): {p.get("name"): p.get("value") for p in s.iter("property")}
             for s in root.iter("testsuite")}
    assert props["cpu"]["gpus"] == "0" and "pcie" not in props["cpu"]["applicable_checks"]
    assert props["gpu"]["gpus"] == "2" and "pcie" in props["gpu"]["applicable_checks"]


def test_auto_nodes_are_probed_at_collection_only_for_a_gpu_only_check(pytester, nvml):
    inv = auto_nodes(pytester, nvml)
    result, reports = run_suite(pytester, inv, "--collect-only", "-k", "memory")
    assert result.ret == 0
    assert not (reports / "latest" / "results.jsonl").exists(), "no probe may run for it"
    result, reports = run_suite(pytester, inv, "--collect-only", "-k", "pcie")
    result.stdout.fnmatch_lines(["*test_pcie*gpu*"])
    assert "test_pcie[cpu]" not in result.stdout.str()
    assert sorted(health_runs(reports)) == ["cpu", "gpu"]
