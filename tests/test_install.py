"""burnin as an installed tool: a wheel built from this checkout, installed (not editable)
into a fresh virtual environment, runs the suites with `burnin run` from a directory
outside the checkout, its probes and inventories found inside the package."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import burnin

REPO = Path(__file__).resolve().parent.parent
# What a build reads; never the developer's venv, reports or build leftovers.
IGNORE = shutil.ignore_patterns(".git", ".venv", ".tox", "build", "dist", "reports", "*.egg-info",
                                "__pycache__", ".pytest_cache", ".ruff_cache", "tests")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A fresh venv with burnin's wheel installed: {python, burnin, site, wheel}."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=IGNORE)
    dist = tmp / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "--no-index", "-w", str(dist), str(src)],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    wheel = next(dist.glob("burnin-*.whl"))
    env_dir = tmp / "venv"
    # No pip of its own (ensurepip costs seconds): this environment's pip installs into
    # it (`pip --python`), as it would with the venv's own.
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=120).stdout.strip())
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                              "--no-deps", "--no-index", str(wheel)], capture_output=True,
                             text=True, timeout=600, env=clean_env())
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # burnin's dependencies, torch among them, from the environment running these tests,
    # as --system-site-packages would give them: nothing is downloaded again. Added after
    # the venv's own site-packages, so burnin itself is the wheel's.
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
            *site.getsitepackages()}
    (purelib / "zz-test-dependencies.pth").write_text("\n".join(sorted(deps)) + "\n")
    return {"python": python, "burnin": env_dir / "bin" / "burnin", "site": purelib,
            "wheel": wheel}


def clean_env() -> dict:
    """The environment without anything that would put this checkout on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def test_the_wheel_carries_probes_suites_inventories_and_data(installed):
    import zipfile
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for where in ("probes", "suites", "inventories"):
        for path in (REPO / where).iterdir():
            if path.suffix in (".py", ".yaml"):
                assert f"burnin/{where}/{path.name}" in names, path
    assert "burnin/data/gpu_models.yaml" in names
    assert "burnin/data/pytest-run.ini" in names
    assert "burnin/py.typed" in names  # a plugin type-checks against burnin.api
    assert not any(n.startswith(("probes/", "suites/", "tests/")) for n in names)


def test_burnin_run_from_a_directory_outside_the_checkout(installed, tmp_path):
    work = tmp_path / "ops"
    work.mkdir()
    # The shipped localhost inventory (no --inventory): this machine, on its CPU.
    res = subprocess.run([str(installed["burnin"]), "run", "-k", "health", "--profile", "quick"],
                         cwd=work, capture_output=True, text=True, timeout=900, env=clean_env())
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    junit = work / "reports" / "latest" / "junit.xml"
    assert junit.is_file(), res.stdout[-3000:]
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == ["localhost"]
    props = {p.get("name"): p.get("value") for p in suites[0].iter("property")}
    assert props["burnin_report"] == "1" and props["complete"] == "true"
    assert props["cluster"] == "localhost" and props["burnin_version"] == burnin.__version__
    cases = {c.get("name"): c for c in suites[0].iter("testcase")}
    # Passed: no failure, error or skip (a warning the node's health gives, such as a
    # kernel log whose ring wrapped on a long-running machine, is its system-out).
    assert list(cases) == ["health"], cases
    assert [e.tag for e in cases["health"] if e.tag != "system-out"] == [], "health passed"
    # The probe that ran was the installed one, from inside the package.
    assert str(installed["site"] / "burnin" / "probes") in subprocess.run(
        [str(installed["python"]), "-c",
         "from burnin.engine.run import PROBES_DIR; print(PROBES_DIR)"],
        cwd=work, capture_output=True, text=True, timeout=120, env=clean_env()).stdout
    admit = subprocess.run([str(installed["burnin"]), "admit", str(junit), "--require",
                            "health", "--json"], cwd=work, capture_output=True, text=True,
                           timeout=120, env=clean_env())
    assert admit.returncode == 0 and '"localhost"' in admit.stdout, admit.stderr


def test_version_and_a_probe_by_hand_from_the_installed_location(installed, tmp_path):
    res = subprocess.run([str(installed["burnin"]), "--version"], capture_output=True,
                         text=True, timeout=120, env=clean_env(), cwd=tmp_path)
    assert res.stdout.strip() == f"burnin {burnin.__version__}", res.stderr
    probe = installed["site"] / "burnin" / "probes" / "sdc.py"
    res = subprocess.run([str(installed["python"]), str(probe), "--help"], capture_output=True,
                         text=True, timeout=300, env=clean_env(), cwd=tmp_path)
    assert res.returncode == 0 and "--selftest" in res.stdout, res.stderr[-2000:]
    res = subprocess.run([sys.executable, str(installed["site"] / "burnin" / "probes" /
                                              "health.py")], input="{}", capture_output=True,
                         text=True, timeout=300, env=clean_env(), cwd=tmp_path)
    assert res.returncode == 0 and '"probe": "health"' in res.stdout, res.stderr[-2000:]


def test_node_check_from_the_installed_wheel(installed, tmp_path):
    # node-check is the one part installed on every node: its package and the probe
    # module it reads the kernel log with (burnin/probes/hostfacts.py) are in the wheel.
    (tmp_path / "data").mkdir()
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\nnodes:\n  - name: this-node\n    gpus: 0\n"
                   f"    workdir: {tmp_path / 'work'}\n"
                   f"    storage: {{path: {tmp_path / 'data'}}}\n")
    res = subprocess.run([str(installed["burnin"]), "node-check", "--inventory", str(inv),
                          "--node", "this-node", "--json"], capture_output=True, text=True,
                         timeout=120, env=clean_env(), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] and [c["check"] for c in doc["checks"]] == ["xid", "fabric", "storage",
                                                                  "host"]
