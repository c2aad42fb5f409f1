"""Inventories that once escaped the validator as exceptions other than InventoryError
(found by tests/fast/test_properties.py): each is now a usage error that says where."""

from __future__ import annotations

import pytest

from burnin.inventory import InventoryError, load_inventory


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
