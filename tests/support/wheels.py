"""Throwaway distributions for the tests of burnin's entry points (burnin/extensions.py):
a real wheel, written by hand (a zip of the modules and a dist-info folder, as the wheel
format says: no build backend, no network), installed with pip into a folder the test
puts on PYTHONPATH; or a dist-info folder written straight into such a folder, which is
what an installed distribution is to importlib.metadata."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path


def _dist_info(name: str, version: str, entry_points: dict[str, dict[str, str]]
               ) -> dict[str, str]:
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    wheel = ("Wheel-Version: 1.0\nGenerator: burnin-tests\nRoot-Is-Purelib: true\n"
             "Tag: py3-none-any\n")
    eps = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in rows.items()) + "\n"
                  for group, rows in entry_points.items())
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    return {f"{info}/METADATA": meta, f"{info}/WHEEL": wheel, f"{info}/entry_points.txt": eps}


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}\n"


def build_wheel(folder: Path, name: str, modules: dict[str, str],
                entry_points: dict[str, dict[str, str]], version: str = "0.1") -> Path:
    """A wheel of `modules` ({path inside the wheel: text}) declaring `entry_points`
    ({group: {name: "module:attr"}}), written into `folder`; returns its path."""
    files = {**modules, **_dist_info(name, version, entry_points)}
    info = next(p.split("/")[0] for p in files if p.endswith("/METADATA"))
    record = "".join(_record_line(p, t.encode()) for p, t in files.items())
    record += f"{info}/RECORD,,\n"
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, text in files.items():
            z.writestr(p, text)
        z.writestr(f"{info}/RECORD", record)
    return path


def pip_install(wheel: Path, target: Path) -> None:
    """Install `wheel` into `target` with pip, offline, as a site would install it."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
                    "--no-deps", "--disable-pip-version-check", "--no-compile", "--target",
                    str(target), str(wheel)], check=True, timeout=120)


def write_installed(target: Path, name: str, modules: dict[str, str],
                    entry_points: dict[str, dict[str, str]], version: str = "0.1") -> None:
    """A distribution as installed in `target` (its modules and dist-info), without pip."""
    for p, text in {**modules, **_dist_info(name, version, entry_points)}.items():
        (target / p).parent.mkdir(parents=True, exist_ok=True)
        (target / p).write_text(text)
