"""The surface an outside author uses: burnin.api type-checks for a site's modules that
import nothing else of burnin (mypy with --strict's flags on them, as a site's CI would
run it), py.typed ships, and burnin.testing reads, judges, records and replays a check's
documents as a run does."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from support.seams_site import MODULES, PIGEON
from support.suiterun import REPO

from burnin import api, extensions, testing
from burnin.api import Check, Num, Obj, Setting, Str, Verdict, document

STRICT = """\
[mypy]
ignore_missing_imports = True
[mypy-burnin.*]
follow_imports = silent
[mypy-site_widgets.*]
disallow_untyped_defs = True
disallow_incomplete_defs = True
disallow_untyped_calls = True
disallow_any_generics = True
warn_return_any = True
no_implicit_reexport = True
"""


def mypy(tmp_path: Path, modules: dict[str, str]) -> subprocess.CompletedProcess:
    for path, text in modules.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "mypy.ini").write_text(STRICT)
    checked = [p for p in modules if not p.endswith("_probe.py")]  # runs on the node
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini",
                           "--cache-dir", str(tmp_path / "cache"), *checked], cwd=tmp_path,
                          env={"MYPYPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def test_a_site_using_burnin_api_alone_type_checks(tmp_path):
    done = mypy(tmp_path, MODULES)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "Success: no issues found" in done.stdout
    for text in MODULES.values():  # what it imports of burnin is burnin.api alone
        assert {line.split()[1] for line in text.splitlines()
                if line.startswith(("from burnin", "import burnin"))} <= {"burnin.api"}


def test_a_wrong_use_of_it_does_not(tmp_path):
    wrong = PIGEON.replace("    loft: str = setting", "    loft: int = setting").replace(
        "return super().run(argv, stdin, *args, **kwargs)",
        "return super().run(argv, stdin, *args, **kwargs).stdout")
    done = mypy(tmp_path, {"site_widgets/__init__.py": "", "site_widgets/pigeon.py": wrong})
    assert done.returncode == 1
    assert 'Incompatible return value type (got "bytes", expected "CommandResult")' \
        in done.stdout


def test_the_api_names_what_it_exports_and_ships_typed():
    assert set(api.__all__) <= set(vars(api)) and len(api.__all__) == len(set(api.__all__))
    assert api.GROUPS == extensions.GROUPS == (
        "burnin.checks", "burnin.transports", "burnin.ledger_backends", "burnin.report_writers")
    assert (REPO / "burnin" / "py.typed").is_file()
    package_data = (REPO / "pyproject.toml").read_text().split(
        "[tool.setuptools.package-data]")[1].split("\n[")[0]
    assert '"burnin" = ["py.typed"]' in package_data


SPINNER = Check(
    name="spinner", doc="it spins", schema=document(Obj(required=("device", "spin"),
                                                        device=Str(64), spin=Num(0)), Obj()),
    settings={"min_spin": Setting("positive", 0.5)}, probe="spinner",
    judge=lambda n, o, j: Verdict(n.name, "spinner", (o.reason,) if not o.ok else tuple(
        f"{d['device']}: {d['spin']:g} < {j.settings['min_spin']:g}"
        for d in o.data["devices"] if d["spin"] < j.settings["min_spin"])))


def doc(spin: float) -> dict:
    return {"probe": "spinner", "schema": 1, "node": {}, "devices": [
        {"device": "s0", "spin": spin}], "figures": {}, "errors": []}


def test_testing_reads_and_judges_documents_as_a_run_does():
    assert testing.outcome_of(SPINNER, doc(0.7)).ok
    bad = testing.outcome_of(SPINNER, {**doc(0.7), "devices": [{"device": "s0"}]})
    assert not bad.ok and "malformed probe output" in bad.reason and "spin" in bad.reason
    assert not testing.outcome_of(SPINNER, b"not json").ok
    got = testing.verdicts(SPINNER, {"n1": doc(0.7), "n2": doc(0.2), "n3": b"{"})
    assert got["n1"].passed and got["n2"].failures == ("s0: 0.2 < 0.5",)
    assert "printed no valid JSON" in got["n3"].failures[0]
    assert testing.verdicts(SPINNER, {"n2": doc(0.2)}, settings={"min_spin": 0.1})["n2"].passed


def test_testing_records_a_real_probe_and_replays_it(tmp_path):
    probe = tmp_path / "spinner_probe.py"
    probe.write_text(textwrap.dedent("""\
        import probelib
        payload = probelib.start(__doc__, "spinner")
        if payload is not None:
            probelib.emit("spinner", {}, [{"device": "s0", "spin": 0.25}], {}, [])
        """))
    check = Check(**{**vars(SPINNER), "probe_path": str(probe)})
    recorded = tmp_path / "docs"
    recorded.mkdir()
    out = testing.record(check, recorded / "spinner.json")
    assert out.ok and out.data["devices"] == [{"device": "s0", "spin": 0.25}], out.reason
    python = testing.replay_python(tmp_path / "py", recorded)
    (recorded / "spinner.json").write_text(json.dumps(doc(0.9)))  # a replay, not the probe
    replayed = testing.record(check, python=python)
    assert replayed.ok and replayed.data["devices"][0]["spin"] == 0.9, replayed.reason
