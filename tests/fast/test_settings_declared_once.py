"""An inventory section's keys, kinds and defaults are declared once, on its dataclass
(burnin/model/settings.py): the schema reads the keys from it and a section's absent keys
take the dataclass's own defaults, so that a default changed there is the default an
inventory gets, and no field can exist that the inventory cannot set."""

from __future__ import annotations

from dataclasses import fields

import pytest

from burnin.inventory import quarantine, schema
from burnin.model import nodes
from burnin.model.settings import kinds_of, section
from burnin.transports import TABLE

SECTIONS = {"storage": nodes.StorageSettings, "quarantine": nodes.QuarantineSettings,
            "quarantine.shared_cause": nodes.SharedCauseSettings,
            "goodput": nodes.GoodputSettings, "node_check": nodes.NodeCheckSettings,
            **{name: row.settings for name, row in TABLE.items() if row.settings}}


@pytest.mark.parametrize("where", sorted(SECTIONS))
def test_every_field_of_a_section_is_a_setting_with_a_known_kind(where):
    cls = SECTIONS[where]
    kinds = kinds_of(cls)
    assert list(kinds) == [f.name for f in fields(cls)], where
    for key, kind in kinds.items():
        assert kind in schema.KINDS or kind in ("mapping", "ledger", "transport"), (key, kind)


def test_the_schema_reads_each_sections_keys_from_its_dataclass():
    assert quarantine.QUARANTINE_KEYS == kinds_of(nodes.QuarantineSettings)
    assert quarantine.SHARED_CAUSE_KEYS == kinds_of(nodes.SharedCauseSettings)
    assert schema.GOODPUT_KEYS == kinds_of(nodes.GoodputSettings)
    assert schema.STORAGE_KEYS == kinds_of(nodes.StorageSettings)


def load(tmp_path, body: str):
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\ndefaults: {transport: local, gpus: 0}\nnodes: [{name: n1}]\n"
                   + body)
    return schema.load_inventory(inv)


def test_an_absent_key_takes_the_dataclasss_default_wherever_it_is_changed(tmp_path,
                                                                            monkeypatch):
    inv = load(tmp_path, "quarantine: {release_after: 4, shared_cause: {min_nodes: 5}}\n"
                         "goodput: {min_voters: 7}\nnode_check: {skip: [dcgm]}\n")
    q = inv.quarantine
    assert q.release_after == 4 and q.repeat_days == nodes.QuarantineSettings().repeat_days
    assert q.shared_cause.min_nodes == 5 and q.shared_cause.labels == nodes.TOPOLOGY_LABELS
    assert inv.goodput.min_voters == 7 and inv.node_check.skip == ("dcgm",)
    # One place: a default changed on the dataclass is what the loader gives.
    monkeypatch.setattr(nodes.QuarantineSettings, "__init__",
                        _with_default(nodes.QuarantineSettings, "repeat_days", 12.5))
    assert load(tmp_path, "quarantine: {release_after: 4}\n").quarantine.repeat_days == 12.5


def _with_default(cls, name, value):
    original = cls.__init__

    def init(self, *args, **kw):
        kw.setdefault(name, value)
        original(self, *args, **kw)
    return init


def test_a_list_becomes_a_tuple_where_the_setting_is_one():
    made = section(nodes.QuarantineSettings, {"actions": ["slurm"], "command": ["a", "b"]})
    assert made.actions == ("slurm",) and made.command == ("a", "b")
    assert made.release_after == nodes.QuarantineSettings().release_after
