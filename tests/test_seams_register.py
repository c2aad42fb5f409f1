"""The loader's rules, in-process (burnin/extensions.py): what each seam takes, where an
added check runs, what a duplicate name gets, and that a refusal is said again to a later
call. tests/test_seams_entry_points.py shows the same through installed distributions."""

from __future__ import annotations

import dataclasses
from importlib import metadata

import pytest

from burnin import checks as check_table
from burnin import extensions
from burnin.api import (
    Backend,
    Check,
    LocalTransport,
    Obj,
    PluginError,
    ReportWriter,
    TransportRow,
    Verdict,
)
from burnin.checks import CHECKS
from burnin.engine.probe_files import probes_for
from burnin.engine.run import PROBES_DIR
from burnin.ledger.backends import BACKENDS, SqliteBackend
from burnin.report import publish
from burnin.transports import TABLE


@pytest.fixture(autouse=True)
def tables():
    """Every table as it was, after each test."""
    saved = (dict(CHECKS), dict(TABLE), dict(BACKENDS), list(publish.WRITERS),
             {g: dict(o) for g, o in extensions.ORIGINS.items()})
    yield
    CHECKS.clear()
    CHECKS.update(saved[0])
    TABLE.clear()
    TABLE.update(saved[1])
    BACKENDS.clear()
    BACKENDS.update(saved[2])
    publish.WRITERS[:] = saved[3]
    for g, o in saved[4].items():
        extensions.ORIGINS[g].clear()
        extensions.ORIGINS[g].update(o)


def gadget(tmp_path, name="gadget", **kw) -> Check:
    probe = tmp_path / "gadget_probe.py"
    probe.write_text("print('{}')\n")
    return Check(name=name, doc="a gadget", judge=lambda n, o, j: Verdict(n.name, name),
                 schema=Obj(), probe_path=str(probe), **kw)


def test_a_check_runs_after_the_single_node_checks_and_before_the_groups(tmp_path):
    extensions.register(extensions.CHECKS_GROUP, "gadget", gadget(tmp_path), "site-gadgets")
    order = list(CHECKS)
    assert order.index("gadget") == max(order.index(c) for c in check_table.single_node()
                                        if c != "gadget") + 1
    assert "gadget" in check_table.single_node()
    assert extensions.installed(extensions.CHECKS_GROUP) == ["gadget"]
    group = gadget(tmp_path, "gizmo", execute=lambda run: {})
    extensions.register(extensions.CHECKS_GROUP, "gizmo", group, "site-gadgets")
    assert list(CHECKS)[-1] == "gizmo" and "gizmo" not in check_table.single_node()


def test_its_probe_joins_the_shipped_ones_in_one_folder(tmp_path):
    check = gadget(tmp_path)
    assert probes_for(PROBES_DIR, CHECKS.values()) == PROBES_DIR  # nothing brought
    joined = probes_for(PROBES_DIR, [*CHECKS.values(), check])
    assert (joined / "gadget.py").read_text() == "print('{}')\n"
    assert (joined / "probelib.py").read_text() == (PROBES_DIR / "probelib.py").read_text()


@pytest.mark.parametrize("change, said", [
    (lambda c: c, "its Check is named 'gadget'"),  # registered as 'widget'
    (lambda c: dataclasses.replace(c, probe="sdc"), "its probe name 'sdc' is a shipped"),
    (lambda c: dataclasses.replace(c, probe_path="/nonexistent/p.py"), "is not there"),
    (lambda c: dataclasses.replace(c, probe_path=""), "is not there"),
    (lambda c: "not a check", "str is not a burnin.api.Check"),
])
def test_a_check_that_cannot_run_is_refused(tmp_path, change, said):
    name = "widget" if said.startswith("its Check is named") else "gadget"
    with pytest.raises(PluginError, match=said):
        extensions.register(extensions.CHECKS_GROUP, name, change(gadget(tmp_path)), "d")
    assert name not in CHECKS


class Pigeon(LocalTransport):
    """A transport of no settings."""


class Scratch(SqliteBackend):
    """A ledger engine."""


@pytest.mark.parametrize("group, name, obj, said", [
    (extensions.TRANSPORTS_GROUP, "pigeon", object, "not a Transport or Launcher"),
    (extensions.TRANSPORTS_GROUP, "pigeon", TransportRow("x.y:Z"), "not a Transport"),
    (extensions.TRANSPORTS_GROUP, "pi-geon", Pigeon, "a Python identifier"),
    (extensions.LEDGER_GROUP, "scratch", Pigeon, "not a burnin.api.Backend"),
    (extensions.LEDGER_GROUP, "scr+atch", Scratch, "letters, digits and _"),
    (extensions.REPORTS_GROUP, "w.json", "text", "not a ReportWriter"),
    ("burnin.nothing", "x", Pigeon, "no such seam 'burnin.nothing'"),
])
def test_each_seam_refuses_what_it_does_not_take(group, name, obj, said):
    with pytest.raises(PluginError, match=said):
        extensions.register(group, name, obj, "d")


def test_each_seam_takes_its_own_kind():
    extensions.register(extensions.TRANSPORTS_GROUP, "pigeon", Pigeon, "d")
    assert TABLE["pigeon"] == TransportRow(Pigeon)
    extensions.register(extensions.LEDGER_GROUP, "Scratch", Scratch, "d")
    assert BACKENDS["scratch"] is Scratch and issubclass(Scratch, Backend)
    extensions.register(extensions.REPORTS_GROUP, "w.json", print, "d")
    assert publish.WRITERS[-1] == ReportWriter("w.json", print)


@pytest.mark.parametrize("group, name", [
    (extensions.TRANSPORTS_GROUP, "ssh"), (extensions.LEDGER_GROUP, "SQLite"),
    (extensions.REPORTS_GROUP, "summary.html"), (extensions.CHECKS_GROUP, "health")])
def test_a_built_in_name_is_refused_and_kept(tmp_path, group, name):
    before = (dict(CHECKS), dict(TABLE), dict(BACKENDS), list(publish.WRITERS))
    obj = {extensions.TRANSPORTS_GROUP: Pigeon, extensions.LEDGER_GROUP: Scratch,
           extensions.REPORTS_GROUP: print,
           extensions.CHECKS_GROUP: gadget(tmp_path, name)}[group]
    with pytest.raises(PluginError, match=r"burnin \(built in\) already has that name"):
        extensions.register(group, name, obj, "site-x")
    assert (dict(CHECKS), dict(TABLE), dict(BACKENDS), list(publish.WRITERS)) == before


def test_a_name_added_once_is_refused_the_second_time():
    extensions.register(extensions.TRANSPORTS_GROUP, "pigeon", Pigeon, "site-a")
    with pytest.raises(PluginError, match="'pigeon' of site-b: site-a already has that name"):
        extensions.register(extensions.TRANSPORTS_GROUP, "pigeon", Pigeon, "site-b")


def found(name: str, dist: str, group=extensions.TRANSPORTS_GROUP) -> extensions.Found:
    return extensions.Found(group, name, f"{dist}:ROW", dist)


def test_duplicates_are_refused_before_anything_imports():
    with pytest.raises(PluginError) as e:
        extensions.refuse_duplicates([found("pigeon", "a"), found("pigeon", "b"),
                                      found("ssh", "c"), found("Sqlite", "d",
                                                               extensions.LEDGER_GROUP)])
    assert str(e.value).splitlines()[1:] == [
        "  burnin.transports 'pigeon' is claimed by two distributions: a (a:ROW) and b "
        "(b:ROW); uninstall one",
        "  burnin.transports 'ssh' of c (c:ROW): burnin (built in) already has that name; "
        "uninstall one, or rename it",
        "  burnin.ledger_backends 'Sqlite' of d (d:ROW): burnin (built in) already has that "
        "name; uninstall one, or rename it"]
    extensions.refuse_duplicates([found("pigeon", "a"), found("pigeon", "a")])  # one dist


def test_a_refusal_is_said_again_to_every_later_call(monkeypatch):
    monkeypatch.setattr(extensions, "_loaded", False)
    monkeypatch.setattr(extensions, "_failure", None)
    entry = metadata.EntryPoint("gadget", "no_such_module_here:CHECK", extensions.CHECKS_GROUP)
    monkeypatch.setattr(extensions, "discover", lambda group, every=None: [
        extensions.Found(group, "gadget", entry.value, "broken-dist", entry)]
        if group == extensions.CHECKS_GROUP else [])
    for _ in range(2):
        with pytest.raises(PluginError, match="'gadget' of broken-dist: no_such_module_here"
                                              ":CHECK does not import: ModuleNotFoundError"):
            extensions.load()
