"""The hca check: perftest's recorded outputs parsed (tests/fixtures/perftest/, their
sources in its README); the real probe over HCA ports laid out as the kernel lists them
(a sysfs tree written by the test) against a stand-in perftest that meets its client on
the TCP port as the real one does and prints a recorded output; one port whose recorded
bandwidth is below its rate fails its node alone in junit.xml, metrics.prom,
summary.html and `burnin admit`; a node without perftest, or without GPUs, is not given
the check."""

from __future__ import annotations

import json
import socket
import sys
import textwrap
from pathlib import Path

import nvmlemu
import pytest
from support.judging import judge, outcome
from support.replay import CORPUS, replay_python
from support.suiterun import REPO, junit_cases

from burnin import cli
from burnin.checks import CHECKS, applicable
from burnin.checks.hca import figures
from burnin.model.nodes import Node
from burnin.probe.protocol import run_probe
from burnin.transports.local import LocalTransport

sys.path.insert(0, str(REPO / "probes"))
import hca as probe  # noqa: E402

sys.path.pop(0)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "perftest"
CHECK = CHECKS["hca"]
NDR = "400 Gb/sec (4X NDR)"

# A stand-in for ib_write_bw and ib_write_lat: the server listens on -p's TCP port and
# waits for its client, as perftest's does; the client connects, and prints the output
# recorded for its device (-d), from the JSON map beside this script.
PERFTEST = '''\
import json, socket, sys
from pathlib import Path
args = sys.argv[1:]
port = int(args[args.index("-p") + 1])
device = args[args.index("-d") + 1]
kind = "lat" if sys.argv[0].endswith("lat") else "bw"
if args[-1] != "localhost":
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", port))
        srv.listen(1)
        srv.settimeout(20)
        conn, _ = srv.accept()
        conn.recv(16)
        conn.close()
    sys.exit(0)
with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
    recorded = json.loads((Path(sys.argv[0]).parent / "outputs.json").read_text())
    sys.stdout.write(Path(recorded[kind][device]).read_text())
    conn.sendall(b"done")
'''


def perftest(tmp: Path, outputs: dict[str, str]) -> Path:
    """ib_write_bw and ib_write_lat in tmp/bin, printing fixtures[outputs[device]]."""
    bin_ = tmp / "bin"
    bin_.mkdir(exist_ok=True)
    (bin_ / "outputs.json").write_text(json.dumps({
        "bw": {d: str(FIXTURES / f) for d, f in outputs.items()},
        "lat": {d: str(FIXTURES / "write_lat_spark.txt") for d in outputs}}))
    for name in ("ib_write_bw", "ib_write_lat"):
        (bin_ / name).write_text(f"#!{sys.executable}\n{PERFTEST}")
        (bin_ / name).chmod(0o755)
    return bin_


def sysfs(tmp: Path, ports: dict[str, tuple[str, str]]) -> Path:
    """/sys/class/infiniband as the kernel lays it out: {hca: (state, rate)}, port 1."""
    root = tmp / "infiniband"
    for hca, (state, rate) in ports.items():
        port = root / hca / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "rate").write_text(rate + "\n")
        (port / "link_layer").write_text("InfiniBand\n")
    return root


def free_port() -> int:
    """A TCP port nothing listens on now: perftest's default may be taken on this machine."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_recorded_outputs_parse_in_perftests_own_formats():
    assert probe.parse_bw((FIXTURES / "write_bw_ndr.txt").read_text()) == {
        "bytes": 65536, "iterations": 5000, "peak_gbps": 392.38, "bw_gbps": 392.34}
    assert probe.parse_bw((FIXTURES / "write_bw_spark.txt").read_text())["bw_gbps"] == 111.71
    lat = probe.parse_lat((FIXTURES / "write_lat_spark.txt").read_text())
    assert (lat["lat_typical_us"], lat["lat_avg_us"], lat["lat_p999_us"]) == (1.47, 1.47, 1.93)
    assert probe.rate_gbps(NDR) == 400.0 and probe.rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5
    assert probe.rate_gbps("") is None
    # Without --report_gbits perftest prints MiB/s: refused, not read as Gb/s.
    mib = (FIXTURES / "write_bw_ndr.txt").read_text().replace("[Gb/sec]", "[MiB/sec]")
    with pytest.raises(ValueError, match="--report_gbits"):
        probe.parse_bw(mib)
    with pytest.raises(ValueError, match="no result line"):
        probe.parse_bw("\n".join((FIXTURES / "write_bw_ndr.txt").read_text().splitlines()
                                 [:-2]) + "\n" + "-" * 87 + "\n")


def port(bw: float | None = 392.34, rate: float | None = 400.0, **extra) -> dict:
    return {"hca": "mlx5_0", "port": 1, "state": "ACTIVE", "rate": f"{rate} Gb/sec",
            "rate_gbps": rate, "bw_gbps": bw, "lat_typical_us": 1.47, **extra}


def failures(*ports: dict, **settings) -> tuple:
    return judge("hca", outcome("hca", list(ports), {"applies": True}),
                 settings=settings)[0]


def test_the_judge_holds_each_port_to_its_rate_and_latency_bound():
    assert failures(port()) == ()
    assert failures(port(bw=111.71, rate=200.0)) == (
        "mlx5_0 port 1 (200.0 Gb/sec): loopback write 111.71 Gb/s, below 0.85 x 200 Gb/s, "
        "the port's rate",)
    assert "implausible" in failures(port(bw=500))[0]
    assert "cannot be judged" in failures(port(rate=None))[0]
    assert failures(port(lat_typical_us=9.0))[0].endswith("above the bound of 5 us")
    assert failures(port(bw=None, error="ValueError: no result line"))[0] == (
        "mlx5_0 port 1 (400.0 Gb/sec): ValueError: no result line")
    fails, warns = judge("hca", outcome("hca", [port(skipped="port state DOWN")],
                                        {"applies": True}))
    assert fails == () and warns == ("mlx5_0 port 1 (400.0 Gb/sec): not measured: port "
                                     "state DOWN",)
    assert judge("hca", outcome("hca", [], {"applies": False, "why": "no RDMA device"})) == \
        ((), ("no RDMA device",))


def test_figures_are_in_base_units():
    got = {f.metric: f.value for f in figures({"data": {"devices": [port()]}})}
    assert got == {"hca_write_bw_gbps": pytest.approx(392.34 / 8),
                   "hca_write_latency_seconds": pytest.approx(1.47e-6)}


def test_a_node_without_perftest_is_not_given_the_check():
    assert "hca" not in applicable(8, 1, frozenset({"dcgm"}))
    assert "hca" in applicable(8, 1, frozenset({"hca"})) and "hca" in applicable(8, 1, None)
    assert "hca" not in applicable(0, 1, None)


def test_the_real_probe_measures_each_active_port_and_skips_the_rest(tmp_path):
    bin_ = perftest(tmp_path, {"mlx5_0": "write_bw_ndr.txt", "mlx5_1": "write_bw_spark.txt"})
    root = sysfs(tmp_path, {"mlx5_0": ("4: ACTIVE", NDR), "mlx5_1": ("4: ACTIVE", NDR),
                            "mlx5_2": ("1: DOWN", NDR)})
    settings = {"sysfs_root": str(root), "ib_write_bw": str(bin_ / "ib_write_bw"),
                "ib_write_lat": str(bin_ / "ib_write_lat"), "seconds": 1,
                "tcp_port": free_port()}
    out = run_probe(LocalTransport(Node("local", "localhost", transport="local", gpus=0),
                                   REPO / "probes"), "hca", {"gpus": 0, "settings": settings},
                    timeout_s=60)
    assert out.ok, out.reason
    got = {p["hca"]: p for p in out.data["devices"]}
    assert got["mlx5_0"]["bw_gbps"] == 392.34 and got["mlx5_0"]["lat_typical_us"] == 1.47
    assert got["mlx5_1"]["bw_gbps"] == 111.71 and got["mlx5_2"]["skipped"] == "port state DOWN"
    fails, warns = judge("hca", out, settings=settings)
    assert fails == ("mlx5_1 port 1 (400 Gb/sec (4X NDR)): loopback write 111.71 Gb/s, below "
                     "0.85 x 400 Gb/s, the port's rate",)
    assert warns == ("mlx5_2 port 1 (400 Gb/sec (4X NDR)): not measured: port state DOWN",)
    with socket.socket() as taken:  # something else already listens on the port
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", settings["tcp_port"]))
        taken.listen(1)
        busy = run_probe(LocalTransport(Node("local", "localhost", transport="local", gpus=0),
                                        REPO / "probes"), "hca",
                         {"gpus": 0, "settings": settings}, timeout_s=60)
    assert {p["hca"]: p.get("error") for p in busy.data["devices"]} == {
        "mlx5_0": f"ValueError: TCP port {settings['tcp_port']} is already in use on this "
                  "host (set tcp_port)",
        "mlx5_1": f"ValueError: TCP port {settings['tcp_port']} is already in use on this "
                  "host (set tcp_port)", "mlx5_2": None}
    none = run_probe(LocalTransport(Node("local", "localhost", transport="local", gpus=0),
                                    REPO / "probes"), "hca",
                     {"gpus": 0, "settings": {**settings, "sysfs_root": str(tmp_path / "no")}},
                     timeout_s=60)
    assert none.data["figures"] == {"applies": False, "why": "no RDMA device"}


def test_a_port_below_its_rate_fails_its_node_in_every_output(pytester, capsys):
    bin_ = perftest(pytester.path, {"mlx5_0": "write_bw_ndr.txt",
                                    "mlx5_1": "write_bw_spark.txt"})
    root = sysfs(pytester.path, {"mlx5_0": ("4: ACTIVE", NDR), "mlx5_1": ("4: ACTIVE", NDR)})
    scenario = nvmlemu.write_scenario(pytester.path / "gpus.json", {"devices": [
        {"uuid": "GPU-h0", "pci_bus_id": "0000:18:00.0"}]})
    gpu_python = nvmlemu.python_wrapper(pytester.path / "gpu-python", scenario)
    replay = replay_python(pytester.path / "replay", python=gpu_python)
    real = replay_python(pytester.path / "real", real=("hca",), python=gpu_python)
    hca = {"ib_write_bw": str(bin_ / "ib_write_bw"), "ib_write_lat": str(bin_ / "ib_write_lat"),
           "sysfs_root": str(root), "seconds": 1, "tcp_port": free_port()}
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        cluster: hcas
        defaults: {{transport: local, gpus: 1, gpu_model: H100-SXM5-80GB, python: {replay}}}
        checks: {{hca: {json.dumps(hca)}}}
        nodes:
          - name: n[1-2]
          - name: n3
            python: {real}
          - name: g4
            checks: {{hca: {{ib_write_bw: {pytester.path / 'absent'}}}}}
          - name: c1
            gpus: 0
        """))
    result = pytester.runpytest(
        str(REPO / "suites" / "test_health.py"), str(REPO / "suites" / "test_hca.py"),
        "--inventory", str(inv), "--reports", str(pytester.path / "reports"),
        "--no-quarantine", "-p", "no:cacheprovider")
    assert result.ret == 1
    reports = pytester.path / "reports"
    cases = junit_cases(reports)
    assert cases["n1"]["hca"] == cases["n2"]["hca"] == ("passed", "")
    assert "hca" not in cases["g4"]  # no perftest there: not collected
    assert "hca" not in cases["c1"]  # a CPU node: not collected
    assert cases["n3"]["hca"] == ("failure", "mlx5_1 port 1 (400 Gb/sec (4X NDR)): loopback "
                                  "write 111.71 Gb/s, below 0.85 x 400 Gb/s, the port's rate")
    latest = (reports / "latest").resolve()
    prom = (latest / "metrics.prom").read_text()
    assert ('burnin_hca_write_bw_bytes_per_second{cluster="hcas",node="n3",hca="mlx5_1",'
            'port="1"} 13963750000') in prom
    page = (latest / "summary.html").read_text()
    assert "loopback write 111.71 Gb/s" in page.split("id='n-n3'")[1].split("</section>")[0]
    capsys.readouterr()
    assert cli.main(["admit", str(latest / "junit.xml"), "--json", "--require",
                     "health,hca"]) == 1
    admission = json.loads(capsys.readouterr().out)
    assert admission["admitted"][:2] == ["n1", "n2"] and "n3" in admission["rejected"]


def test_the_recorded_document_fits_the_declared_shape():
    doc = json.loads((CORPUS / "hca.gpu.json").read_text())
    assert CHECK.schema.problem(doc, "doc") == "" and doc["figures"]["applies"]
