"""Inventories that once escaped the validator as exceptions other than InventoryError
(found by tests/fast/test_properties.py): each is now a usage error that says where."""

from __future__ import annotations

import pytest

from burnin.checks import CHECKS, Kind
from burnin.inventory.schema import InventoryError, load_inventory


@pytest.mark.parametrize("text,error", [
    ("version: 1\nnodes: " + "[" * 5000 + "]" * 5000 + "\n",
     "inventory.yaml: not valid YAML: nested too deeply to read"),
    ("version: 1\nnodes: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
     "inventory.yaml: not valid YAML: nested too deeply to read"),
    ("version: 1\nnodes: [{name: n1}]\ncluster: a\x1fb\n",
     "inventory.yaml:3: not valid YAML: special characters are not allowed #x001f"),
    ("version: 1\nnodes: [{name: n1}]\nadmission:\n  require:\n  - [health, sdc]\n",
     "inventory.yaml:4: admission.require: expected a non-empty list of: health, pcie, "),
    ("version: 1\nnodes: [{name: n1}]\nadmission: {require: [{health: 1}]}\n",
     "inventory.yaml:3: admission.require: expected a non-empty list of: health, pcie, "),
], ids=["deep-list", "deep-mapping", "control-character", "list-in-require", "map-in-require"])
def test_a_hostile_inventory_is_an_inventory_error(tmp_path, text, error):
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError) as e:
        load_inventory(path)
    assert str(e.value).startswith(f"{tmp_path}/{error}"), str(e.value)


OWN_KINDS = [(check.name, key, s.kind.expected) for check in CHECKS.values()
             for key, s in check.settings.items() if isinstance(s.kind, Kind)]


def test_the_checks_declare_their_own_kinds():
    assert {(c, k) for c, k, _ in OWN_KINDS} >= {
        ("health", "compute_mode"), ("health", "kernel_log"), ("dcgm", "level"),
        ("sdc", "dtype"), ("burn", "verify_every"), ("storage", "verify")}


@pytest.mark.parametrize(("check", "key", "expected"), OWN_KINDS)
def test_a_checks_own_kind_refuses_a_bad_value(tmp_path, check, key, expected):
    """A kind a check declares (Setting(Kind(...))) is what the inventory checks: a value
    outside it stops the run with the line, the key and what the check expects."""
    path = tmp_path / "inv.yaml"
    path.write_text("version: 1\ncluster: c\nnodes:\n  - name: n1\n"
                    f"checks:\n  {check}:\n    {key}: -1\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert f"expected {expected}, got" in str(info.value) and key in str(info.value)
