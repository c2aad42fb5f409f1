"""The four seams open to code outside the repository: a real distribution, built as a
wheel here and installed with pip (tests/support/seams_site.py: a check, a transport, a
ledger backend and a report writer, through burnin.api alone), works through every
command: `burnin inventory check`, `burnin ledger init`, `burnin run`, `burnin admit`,
`burnin quarantine`, `burnin history`, `burnin report` and `pytest suites/`. A name two
distributions claim, or one a built-in has, is refused naming both; a plugin that does
not import is named. Every command runs as a subprocess, as an operator runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.replay import replay_python
from support.seams_site import ENTRY_POINTS, MODULES
from support.suiterun import SUITES, junit_cases
from support.wheels import build_wheel, pip_install, write_installed

from burnin.ledger.api import Ledger

BURNIN = str(Path(sys.executable).with_name("burnin"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """site-widgets, installed: the folder to put on PYTHONPATH."""
    root = tmp_path_factory.mktemp("site")
    pip_install(build_wheel(root, "site-widgets", MODULES, ENTRY_POINTS), root / "lib")
    return root / "lib"


def command(argv: list[str], cwd: Path, *paths: Path, **env: str
            ) -> subprocess.CompletedProcess:
    environ = {**os.environ, **env,
               "PYTHONPATH": os.pathsep.join(map(str, paths))}
    return subprocess.run(argv, cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=300)


def test_each_seam_works_through_every_command(site, tmp_path):
    loft, scratch, reports = tmp_path / "loft", tmp_path / "scratch", tmp_path / "reports"
    loft.mkdir()
    scratch.mkdir()
    spins = tmp_path / "spins"
    spins.write_text("w1 0.9\nw2 0.2\n")
    inv = tmp_path / "inv.yaml"
    inv.write_text(textwrap.dedent(f"""\
        version: 1
        cluster: widgets
        defaults: {{transport: pigeon, gpus: 0, python: {replay_python(tmp_path / "py")},
                    pigeon: {{loft: {loft}}}}}
        nodes:
          - name: w[1-2]
        checks: {{widget: {{min_spin: 0.5}}}}
        quarantine: {{ledger: "scratch://fleet", release_after: 1}}
        """))
    env = {"WIDGET_SPINS": str(spins), "SCRATCH_ROOT": str(scratch)}

    def burnin(*argv: str, paths=(site,)) -> subprocess.CompletedProcess:
        return command([BURNIN, *argv], tmp_path, *paths, **env)

    shown = burnin("inventory", "check", str(inv), "--json")
    assert shown.returncode == 0, shown.stderr
    node = json.loads(shown.stdout)["nodes"][0]
    assert (node["transport"], node["pigeon"]) == ("pigeon", {"loft": str(loft)})
    assert burnin("ledger", "init", "scratch://fleet").returncode == 0
    assert (scratch / "fleet.db").exists()

    ran = burnin("run", "--inventory", str(inv), "--reports", str(reports), "--profile",
                 "quick", "-k", "health or widget", "-p", "no:cacheprovider")
    assert ran.returncode == 1, ran.stdout[-3000:] + ran.stderr[-2000:]
    cases = junit_cases(reports)
    assert cases["w1"]["widget"] == ("passed", "")
    assert cases["w2"]["widget"] == ("failure", "w0: spin 0.2, below the floor of 0.5")
    assert {p.name.split(".")[0] for p in loft.iterdir()} == {"w1", "w2"}  # by pigeon
    assert Ledger(scratch / "fleet.db", create=False).quarantined() == {"w2"}
    latest = (reports / "latest").resolve()
    assert json.loads((latest / "widgets.json").read_text())["nodes"] == {
        "w1": ["passed", "passed"], "w2": ["failed", "passed"]}
    assert 'burnin_widget_spin_ratio{cluster="widgets",node="w1",device="w0"} 0.9' in \
        (latest / "metrics.prom").read_text()

    admit = burnin("admit", str(latest / "junit.xml"), "--inventory", str(inv),
                   "--require", "health,widget", "--json")
    assert admit.returncode == 1, admit.stderr
    decided = json.loads(admit.stdout)
    assert decided["admitted"] == ["w1"] and list(decided["rejected"]) == ["w2"]
    listed = burnin("quarantine", "--inventory", str(inv), "list", "--json")
    assert [n["node"] for n in json.loads(listed.stdout)["nodes"]] == ["w2"], listed.stderr
    history = burnin("history", "w2", "--ledger", "scratch://fleet")
    assert history.returncode == 0 and "quarantined" in history.stdout, history.stderr
    (latest / "widgets.json").unlink()
    assert burnin("report", str(latest)).returncode == 0
    assert (latest / "widgets.json").exists()

    # pytest itself, with the plugin its entry point loads: w2 repaired and released
    spins.write_text("w1 0.9\nw2 0.8\n")
    again = command([sys.executable, "-m", "pytest", SUITES, "--inventory", str(inv),
                     "--reports", str(reports), "--profile", "quick", "--revalidate",
                     "-p", "no:cacheprovider", "-k", "health or widget"], tmp_path, site,
                    **env)
    assert again.returncode == 0, again.stdout[-3000:]
    assert junit_cases(reports)["w2"]["widget"] == ("passed", "")


def refused(tmp_path: Path, *paths: Path) -> dict[str, subprocess.CompletedProcess]:
    """Every way in refuses the installed set: `burnin inventory check`, `burnin run` and
    `pytest suites/`, each with a message and a usage error's exit, never a traceback."""
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\ndefaults: {transport: local, gpus: 0}\nnodes: [{name: n1}]\n")
    runs = {"inventory check": command([BURNIN, "inventory", "check", str(inv)], tmp_path,
                                       *paths),
            "run": command([BURNIN, "run", "--inventory", str(inv), "-p", "no:cacheprovider"],
                           tmp_path, *paths),
            "pytest": command([sys.executable, "-m", "pytest", SUITES, "--inventory", str(inv),
                               "-p", "no:cacheprovider"], tmp_path, *paths),
            # no --inventory: the plugin waits for a collected check before it says so
            "pytest, this machine": command([sys.executable, "-m", "pytest", SUITES, "-p",
                                             "no:cacheprovider"], tmp_path, *paths)}
    for how, done in runs.items():
        assert done.returncode == (4 if how.startswith("pytest") else 2), (how, done.stderr)
        assert "Traceback" not in done.stdout + done.stderr, how
    return runs


def test_a_name_two_distributions_claim_is_refused_naming_both(site, tmp_path):
    other = tmp_path / "other"
    write_installed(other, "other-birds",
                    {"other_birds.py": "from site_widgets.pigeon import ROW\n"},
                    {"burnin.transports": {"pigeon": "other_birds:ROW",
                                           "local": "other_birds:ROW"}})
    runs = refused(tmp_path, site, other)
    said = runs["inventory check"].stderr
    assert "burnin.transports 'pigeon' is claimed by two distributions: site-widgets " \
        "(site_widgets.pigeon:ROW) and other-birds (other_birds:ROW); uninstall one" in said
    assert "burnin.transports 'local' of other-birds (other_birds:ROW): burnin (built in) " \
        "already has that name" in said
    assert "is claimed by two distributions" in runs["pytest"].stdout + runs["pytest"].stderr


def test_a_plugin_that_does_not_import_is_named(tmp_path):
    broken = tmp_path / "broken"
    write_installed(broken, "broken-checks", {"broken_checks.py": "import no_such_module\n"},
                    {"burnin.checks": {"gadget": "broken_checks:CHECK"}})
    runs = refused(tmp_path, broken)
    assert "burnin.checks 'gadget' of broken-checks: broken_checks:CHECK does not import: " \
        "ModuleNotFoundError: No module named 'no_such_module'" in runs["run"].stderr


def test_as_root_a_plugin_whose_code_others_can_change_is_refused_unread(tmp_path):
    """burnin runs as root (node-check under slurmd, a prolog): it imports a plugin only
    when every file of its code is root's alone, as it runs only root's commands; what
    another user could change is refused before a line of it runs."""
    assert os.geteuid() == 0, "this test runs as root (CI does)"
    marker = tmp_path / "ran"
    lib = tmp_path / "lib"
    write_installed(lib, "loose-checks",
                    {"loose_checks/__init__.py": "",
                     "loose_checks/gadget.py": f"open({str(marker)!r}, 'w').close()\n"},
                    {"burnin.checks": {"gadget": "loose_checks.gadget:CHECK"}})
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\ndefaults: {transport: local, gpus: 0}\nnodes: [{name: n1}]\n")
    loose = lib / "loose_checks" / "gadget.py"
    loose.chmod(0o666)
    done = command([BURNIN, "inventory", "check", str(inv)], tmp_path, lib)
    assert done.returncode == 2, done.stderr
    assert f"burnin.checks 'gadget' of loose-checks: refusing the code of {loose} as root: " \
        in done.stderr, done.stderr
    assert "writable by group or others" in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists(), "root ran the code it refused"
    loose.chmod(0o644)  # root's alone: imported (and then refused as no check, not unread)
    done = command([BURNIN, "inventory", "check", str(inv)], tmp_path, lib)
    assert marker.exists() and "refusing the code" not in done.stderr, done.stderr
