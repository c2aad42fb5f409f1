"""The inventory's `node_check:` settings: defaults, values, and each wrong value named
with its file, line and key before any node is touched."""

from __future__ import annotations

import pytest

from burnin.inventory.schema import InventoryError, load_inventory
from burnin.model.nodes import NodeCheckSettings

BASE = "version: 1\ncluster: c\nnodes:\n  - name: n1\n"


def load(tmp_path, text: str):
    path = tmp_path / "inv.yaml"
    path.write_text(BASE + text)
    return load_inventory(path)


def test_defaults_and_values(tmp_path):
    assert load(tmp_path, "").node_check == NodeCheckSettings()
    assert NodeCheckSettings().budget_s == 5.0
    got = load(tmp_path, "node_check:\n  budget_s: 2.5\n  scontrol: /opt/slurm/bin/scontrol\n"
                         "  min_free_gib: 0\n  dcgm: 'off'\n  skip: [dcgm, fabric]\n")
    assert got.node_check == NodeCheckSettings(2.5, "/opt/slurm/bin/scontrol", 0, "off",
                                               ("dcgm", "fabric"))
    assert NodeCheckSettings().state_dir == "/var/lib/burnin/node-check"
    assert NodeCheckSettings().textfile is None
    got = load(tmp_path, "node_check:\n  state_dir: /srv/nc/{node}\n"
                         "  textfile: /var/lib/node_exporter\n")
    assert got.node_check.state_dir == "/srv/nc/{node}"
    assert got.node_check.textfile == "/var/lib/node_exporter"


@pytest.mark.parametrize("body, key, expected", [
    ("budget_s: 0", "node_check.budget_s", "a number of seconds above 0, at most 50"),
    ("budget_s: 61", "node_check.budget_s", "at most 50"),
    ("budget_s: fast", "node_check.budget_s", "a number of seconds"),
    ("dcgm: on", "node_check.dcgm", "auto or off"),
    ("skip: [gpu, torch]", "node_check.skip", "a list of: gpu, xid, fabric, storage, host, dcgm"),
    ("min_free_gib: -1", "node_check.min_free_gib", "a number, 0 or above"),
    ("interval_s: 5", "node_check.interval_s", "unknown key"),
    ("state_dir: state", "node_check.state_dir", "an absolute path"),
    ("textfile: ''", "node_check.textfile", "an absolute path"),
])
def test_wrong_values_are_named(tmp_path, body, key, expected):
    with pytest.raises(InventoryError) as e:
        load(tmp_path, f"node_check:\n  {body}\n")
    assert f"inv.yaml:6: {key}: " in str(e.value) and expected in str(e.value)


def test_node_check_must_be_a_mapping(tmp_path):
    with pytest.raises(InventoryError) as e:
        load(tmp_path, "node_check: 5\n")
    assert "node_check: expected a mapping" in str(e.value)
