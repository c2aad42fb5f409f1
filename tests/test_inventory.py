"""Inventory parsing: a table of good files and of bad ones, each with its message."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from support import incli

from burnin.inventory.schema import InventoryError, load_inventory, select_nodes

REPO = Path(__file__).resolve().parent.parent

GOOD = textwrap.dedent("""\
    version: 1
    cluster: rack42
    defaults:
      transport: ssh
      gpus: 8
      gpu_model: H100-SXM5-80GB
      ssh: {user: root, port: 22, identity_file: ~/.ssh/id_ed25519}
      srun: {partition: gpu, extra_args: [--account=ops]}
    nodes:
      - name: gpu[001-004]
        address: 10.42.0.[1-4]
        labels: {rack: r42}
      - name: gpu033
        address: 10.42.0.33
        ssh: {port: 2222}
        gpus: 4
      - name: cpu1
        transport: local
        gpus: auto
    checks:
      burn: {duration_s: 30}
      health: {timeout_s: 5}
    quarantine:
      actions: [slurm, command]
      command: [/usr/local/bin/ticket, "{node}"]
    """)


def write(tmp_path: Path, text: str, name: str = "inv.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_good_inventory_expands_nodes_and_merges_overrides(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD))
    assert inv.cluster == "rack42"
    assert [n.name for n in inv.nodes] == ["gpu001", "gpu002", "gpu003", "gpu004",
                                           "gpu033", "cpu1"]
    assert [n.address for n in inv.nodes[:4]] == [f"10.42.0.{i}" for i in range(1, 5)]
    g33 = inv.node("gpu033")
    # A node's ssh: {port: 2222} changes the port and keeps the other ssh defaults.
    assert (g33.ssh.port, g33.ssh.user, g33.ssh.identity_file) == (2222, "root",
                                                                   "~/.ssh/id_ed25519")
    assert g33.gpus == 4 and inv.node("gpu001").gpus == 8
    assert inv.node("cpu1").gpus is None and inv.node("cpu1").transport == "local"
    assert inv.node("gpu001").labels == {"rack": "r42"}
    assert inv.node("gpu001").srun.extra_args == ("--account=ops",)
    assert inv.checks == {"burn": {"duration_s": 30}, "health": {"timeout_s": 5}}
    assert inv.quarantine.actions == ("slurm", "command")
    assert inv.quarantine.command == ("/usr/local/bin/ticket", "{node}")


ENV = """\
    version: 1
    defaults:
      env: {NCCL_SOCKET_IFNAME: eth0, NCCL_IB_HCA: mlx5, NCCL_DEBUG: WARN}
    nodes:
      - name: gpu[01-02]            # a node group: its env over the defaults'
        env: {NCCL_SOCKET_IFNAME: ib0, GLOO_SOCKET_IFNAME: ib0}
      - name: gpu03                 # one node: its own env over the defaults'
        env: {NCCL_IB_HCA: "=mlx5_0:1,mlx5_3:1", NCCL_DEBUG: ""}
      - name: gpu04
    """


def test_env_merges_name_by_name_the_node_entry_over_the_defaults(tmp_path):
    inv = load_inventory(write(tmp_path, ENV))
    assert inv.node("gpu01").env == inv.node("gpu02").env == {
        "NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5", "NCCL_DEBUG": "WARN",
        "GLOO_SOCKET_IFNAME": "ib0"}
    assert inv.node("gpu03").env == {"NCCL_SOCKET_IFNAME": "eth0",
                                     "NCCL_IB_HCA": "=mlx5_0:1,mlx5_3:1", "NCCL_DEBUG": ""}
    assert inv.node("gpu04").env == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5",
                                     "NCCL_DEBUG": "WARN"}
    assert load_inventory(write(tmp_path, GOOD)).node("gpu001").env == {}


def test_cli_inventory_check_prints_each_nodes_env(tmp_path):
    res = burnin_cli("inventory", "check", "--json", str(write(tmp_path, ENV)))
    assert res.returncode == 0, res.stderr
    nodes = {n["name"]: n for n in json.loads(res.stdout)["nodes"]}
    assert nodes["gpu03"]["env"]["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_3:1"
    assert nodes["gpu04"]["env"] == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5",
                                     "NCCL_DEBUG": "WARN"}
    res = burnin_cli("inventory", "check", str(write(tmp_path, ENV)))
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("gpu03 "))
    assert "NCCL_IB_HCA==mlx5_0:1,mlx5_3:1" in row and "NCCL_DEBUG=''" in row


def test_minimal_inventory_gets_built_in_defaults(tmp_path):
    inv = load_inventory(write(tmp_path, "version: 1\nnodes:\n  - name: a\n"))
    (node,) = inv.nodes
    assert (node.address, node.transport, node.gpus, node.python) == ("a", "ssh", None, None)
    assert inv.cluster == "inv"  # the file's name when no cluster is given


@pytest.mark.parametrize("path", sorted((REPO / "inventories").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_inventories_are_valid(path):
    assert load_inventory(path).nodes


BAD = [
    # (id, file text, expected line, fragments the message must hold)
    ("unknown-top-key", "version: 1\nnodez: []\nnodes:\n  - name: a\n",
     2, ["nodez", "unknown key", "expected one of"]),
    ("unknown-nested-key", "version: 1\ndefaults:\n  ssh:\n    prot: 22\nnodes:\n  - name: a\n",
     4, ["defaults.ssh.prot", "unknown key", "port"]),
    ("unknown-node-key", "version: 1\nnodes:\n  - name: a\n    gpu: 8\n",
     4, ["nodes[0].gpu", "unknown key", "gpus"]),
    ("wrong-type-port", "version: 1\ndefaults:\n  ssh: {port: twenty-two}\nnodes:\n  - name: a\n",
     3, ["defaults.ssh.port", "port number", "'twenty-two'"]),
    ("wrong-type-gpus", "version: 1\nnodes:\n  - name: a\n    gpus: eight\n",
     4, ["nodes[0].gpus", "integer >= 0, or auto"]),
    ("bool-is-not-int", "version: 1\nnodes:\n  - name: a\n    gpus: true\n",
     4, ["nodes[0].gpus", "got bool True"]),
    ("bad-transport", "version: 1\ndefaults: {transport: telnet}\nnodes:\n  - name: a\n",
     2, ["defaults.transport", "ssh, srun, local"]),
    ("unknown-gpu-model", "version: 1\ndefaults: {gpu_model: H100-SMX5}\nnodes:\n  - name: a\n",
     2, ["defaults.gpu_model", "H100-SXM5-80GB"]),
    ("name-address-lengths", "version: 1\nnodes:\n  - name: n[1-3]\n    address: 10.0.0.[1-2]\n",
     4, ["nodes[0].address", "2 addresses", "3 nodes"]),
    ("duplicate-name", "version: 1\nnodes:\n  - name: n[1-3]\n  - name: n2\n",
     4, ["nodes[1].name", "n2 is listed twice", "line 3"]),
    ("duplicate-yaml-key", "version: 1\nnodes:\n  - name: a\n    gpus: 1\n    gpus: 2\n",
     5, ["gpus", "duplicate key", "line 4"]),
    ("bad-hostlist", "version: 1\nnodes:\n  - name: n[1-\n",
     3, ["nodes[0].name", "not a valid hostlist"]),
    ("missing-name", "version: 1\nnodes:\n  - address: 10.0.0.1\n",
     3, ["nodes[0].name", "missing"]),
    ("missing-nodes", "version: 1\ncluster: x\n", 1, ["nodes", "missing"]),
    ("empty-nodes", "version: 1\nnodes: []\n", 2, ["nodes", "non-empty list"]),
    ("missing-version", "nodes:\n  - name: a\n", 1, ["version", "missing"]),
    ("unsupported-version", "version: 2\nnodes:\n  - name: a\n",
     1, ["version", "unsupported version 2"]),
    ("unknown-check", "version: 1\nnodes:\n  - name: a\nchecks:\n  burnn: {duration_s: 1}\n",
     5, ["checks.burnn", "unknown check", "burn"]),
    ("unknown-check-setting",
     "version: 1\nnodes:\n  - name: a\nchecks:\n  burn: {duration: 1}\n",
     5, ["checks.burn.duration", "unknown key", "duration_s"]),
    ("check-setting-type",
     "version: 1\nnodes:\n  - name: a\nchecks:\n  storage: {min_read_gbps_per_gpu: fast}\n",
     5, ["checks.storage.min_read_gbps_per_gpu", "a number"]),
    ("quarantine-action", "version: 1\nnodes:\n  - name: a\nquarantine:\n  actions: [email]\n",
     5, ["quarantine.actions", "slurm, command"]),
    ("command-action-without-command",
     "version: 1\nnodes:\n  - name: a\nquarantine:\n  actions: [command]\n",
     5, ["quarantine.command", "missing"]),
    ("env-bad-name", "version: 1\nnodes:\n  - name: a\n    env:\n      nccl_debug: INFO\n",
     5, ["nodes[0].env.nccl_debug", "not an environment variable name", "[A-Z_][A-Z0-9_]*"]),
    ("env-name-starts-with-digit",
     "version: 1\ndefaults:\n  env: {NCCL_DEBUG: INFO,\n        9LIVES: x}\nnodes:\n  - name: a\n",
     4, ["defaults.env.9LIVES", "not an environment variable name"]),
    ("env-number-value", "version: 1\ndefaults:\n  env:\n    NCCL_IB_TIMEOUT: 22\n"
                         "nodes:\n  - name: a\n",
     4, ["defaults.env.NCCL_IB_TIMEOUT", "expected a string, got int 22", "quote it"]),
    ("env-not-mapping", "version: 1\nnodes:\n  - name: a\n    env: [NCCL_DEBUG=INFO]\n",
     4, ["nodes[0].env", "expected a mapping"]),
    ("env-test-hook", "version: 1\nnodes:\n  - name: a\n    env: {BURNIN_EMULATE_CUDA: '0'}\n",
     4, ["nodes[0].env.BURNIN_EMULATE_CUDA", "test-only hooks"]),
    ("env-loader", "version: 1\ndefaults:\n  env:\n    LD_PRELOAD: /x.so\nnodes:\n  - name: a\n",
     4, ["defaults.env.LD_PRELOAD", "when the process starts"]),
    ("env-rank", "version: 1\nnodes:\n  - name: a\n    env:\n      MASTER_PORT: '1'\n",
     5, ["nodes[0].env.MASTER_PORT", "sets it for each rank"]),
    # The probes' test hooks are not settings: no inventory plants faults or pauses a probe.
    ("test-hook-sdc-inject", "version: 1\nnodes:\n  - name: a\nchecks:\n"
                             "  sdc: {inject: [{product: 1, element: [0, 0], bit: 3}]}\n",
     5, ["checks.sdc.inject", "unknown key"]),
    ("test-hook-memory-backing-dir", "version: 1\nnodes:\n  - name: a\n    checks:\n"
                                     "      memory: {backing_dir: /dev/shm/x}\n",
     5, ["nodes[0].checks.memory.backing_dir", "unknown key"]),
    ("test-hook-memory-alias-pages", "version: 1\nnodes:\n  - name: a\nchecks:\n  memory:\n"
                                     "    alias_pages: [{page: 3, onto: 7}]\n",
     6, ["checks.memory.alias_pages", "unknown key"]),
    ("test-hook-memory-handshake", "version: 1\nnodes:\n  - name: a\nchecks:\n"
                                   "  memory: {handshake_dir: /tmp/h}\n",
     5, ["checks.memory.handshake_dir", "unknown key"]),
    ("test-hook-storage-handshake", "version: 1\nnodes:\n  - name: a\nchecks:\n"
                                    "  storage: {handshake_dir: /tmp/h}\n",
     5, ["checks.storage.handshake_dir", "unknown key"]),
    ("defaults-not-mapping", "version: 1\ndefaults: [a]\nnodes:\n  - name: a\n",
     2, ["defaults", "expected a mapping"]),
    ("node-not-mapping", "version: 1\nnodes:\n  - just-a-name\n",
     3, ["nodes[0]", "expected a mapping"]),
    ("not-yaml", "version: 1\nnodes:\n  - name: [a\n", 4, ["not valid YAML"]),
    ("tab-indent", "version: 1\nnodes:\n\t- name: a\n", 3, ["not valid YAML"]),
    ("not-a-mapping", "- version: 1\n", 1, ["expected a mapping"]),
]


@pytest.mark.parametrize("text,line,fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_inventory_names_file_line_key_and_expectation(tmp_path, text, line, fragments):
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    message = str(info.value)
    assert f"{path}:{line}:" in message
    for fragment in fragments:
        assert fragment in message


def test_every_error_of_a_file_is_reported_at_once(tmp_path):
    path = write(tmp_path, "version: 1\ndefaults: {gpus: -1, workdir: 3}\nnodes:\n"
                           "  - name: a\n    colour: red\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert len(info.value.errors) == 3


def test_missing_file(tmp_path):
    with pytest.raises(InventoryError, match="file not found"):
        load_inventory(tmp_path / "nope.yaml")


def test_select_nodes_subset_and_unknown(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD))
    assert [n.name for n in select_nodes(inv, "gpu[002-003],cpu1")] == ["gpu002", "gpu003",
                                                                       "cpu1"]
    with pytest.raises(ValueError, match=r"gpu\[005-006\]"):
        select_nodes(inv, "gpu[004-006]")
    with pytest.raises(ValueError, match="not a valid hostlist"):
        select_nodes(inv, "gpu[1-")


def burnin_cli(*args: str) -> subprocess.CompletedProcess:
    # In the test's process (tests/support/incli.py): an exception out of the command fails
    # the test as a traceback would. tests/test_cli.py runs `inventory check` as a process.
    return incli.burnin(*args)


def test_cli_inventory_check_prints_expanded_nodes(tmp_path):
    res = burnin_cli("inventory", "check", str(write(tmp_path, GOOD)))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["NODE", "ADDRESS", "TRANSPORT"]
    assert any(ln.split()[:2] == ["gpu033", "10.42.0.33:2222"] for ln in lines)
    assert "6 nodes, valid" in lines[-1]


@pytest.mark.parametrize("text,line,fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_cli_inventory_check_bad_file_exits_2_without_traceback(tmp_path, text, line,
                                                                fragments):
    path = write(tmp_path, text)
    res = burnin_cli("inventory", "check", str(path))
    assert res.returncode == 2
    assert f"{path}:{line}:" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout
