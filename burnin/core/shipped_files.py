"""Where the files burnin ships beside its code are: probes/, suites/, inventories/.

In the repository they are top-level directories, where `pytest suites/` runs them from a
checkout. A wheel carries them inside the package (pyproject.toml maps them there at build
time): burnin/probes, burnin/suites, burnin/inventories, found through importlib.resources.
The same files either way; an editable install or PYTHONPATH=checkout uses the checkout's.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from burnin.errors import NotShipped  # noqa: F401  (raised here, caught by callers)

NAMES = ("probes", "suites", "inventories")


def shipped(name: str) -> Path:
    """The directory `name` (one of NAMES) as a real path: probes are run by a node's own
    interpreter and copied to nodes, so they must be files, never a zip member."""
    if name not in NAMES:
        raise ValueError(f"burnin ships no {name!r}; expected one of {', '.join(NAMES)}")
    inside = resources.files("burnin").joinpath(name)
    if isinstance(inside, Path) and inside.is_dir():  # installed from a wheel
        return inside
    package = Path(__file__).resolve().parent.parent  # burnin/, above burnin/core/
    checkout = package.parent
    # Beside the package only in burnin's own checkout: an installed package's parent is
    # site-packages, where a directory of that name would belong to someone else.
    if (checkout / "pyproject.toml").is_file() and (checkout / name).is_dir():
        return checkout / name
    raise NotShipped(f"this burnin ({package}) has no {name}/: neither inside the package "
                     "(an install from a wheel) nor beside it (a checkout); reinstall it")


def inventory(name: str = "localhost.yaml") -> Path:
    """A shipped inventory: localhost.yaml validates the machine burnin runs on."""
    return shipped("inventories") / name
