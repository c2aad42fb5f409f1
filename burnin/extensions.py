"""Extensions from installed distributions: the one loader of burnin's four seams.

A site's own check, transport, ledger backend or report writer arrives as an entry point
of a distribution it installs (pyproject.toml's `[project.entry-points."burnin.checks"]`
and the like; docs/developer/plugins.md). `load()` reads the four groups once per
process and puts each in its table, beside the built-in rows: the checks' CHECKS
(burnin/checks/__init__.py), the transports' TABLE (burnin/transports/__init__.py), the
ledger's BACKENDS (burnin/ledger/backends.py), the reports' WRITERS
(burnin/report/publish.py). The CLI calls it before any command, the pytest plugin in
pytest_configure, so that `burnin inventory check`, `burnin run`, `pytest suites/` and
every other command see the same tables.

A name is one thing: an entry point that claims a built-in's name, or one that two
distributions claim, is refused (PluginError, naming both), never a silent replacement;
so is one that does not import, or is not what its group takes.

Layer 11: may import every layer below it (it fills the tables of layers 3, 5 and 10);
the plugin, the CLI and burnin.api import it.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from burnin import checks as check_table
from burnin.checks import CHECKS, Check
from burnin.core.rootfiles import refusal, running_as_root, untrusted
from burnin.core.shipped_files import shipped
from burnin.errors import PluginError
from burnin.ledger.backends import BACKENDS, Backend
from burnin.report import publish
from burnin.report.publish import Published, ReportWriter
from burnin.transports import TABLE, Launcher, Transport, TransportRow

CHECKS_GROUP = "burnin.checks"
TRANSPORTS_GROUP = "burnin.transports"
LEDGER_GROUP = "burnin.ledger_backends"
REPORTS_GROUP = "burnin.report_writers"
GROUPS = (CHECKS_GROUP, TRANSPORTS_GROUP, LEDGER_GROUP, REPORTS_GROUP)
BUILT_IN = "burnin (built in)"
MAX_CODE_FILES = 5000  # a plugin's files root checks before importing it

# {group: {name: the distribution that brought it}}: what load() (or register()) added.
ORIGINS: dict[str, dict[str, str]] = {g: {} for g in GROUPS}
_loaded = False
_failure: PluginError | None = None  # load()'s refusal, said again to a later call
_lock = threading.Lock()


@dataclass(frozen=True)
class Found:
    """One entry point of a seam's group: its name, its target ('module:attr'), and the
    distribution that declares it."""

    group: str
    name: str
    target: str
    dist: str
    entry: metadata.EntryPoint | None = None


def load() -> None:
    """Fill the four tables from the installed distributions' entry points, once per
    process (a later call does nothing, or raises the first call's error again).
    PluginError for a duplicate name, a target that does not import, or one that is not
    what its group takes: the command or run stops there, before anything is touched."""
    global _loaded, _failure
    with _lock:
        if _loaded:
            if _failure is not None:
                raise _failure
            return
        _loaded = True
        try:
            every = metadata.entry_points()  # one scan of the installed distributions
            found = [f for group in GROUPS for f in discover(group, every)]
            refuse_duplicates(found)
            made = [(f, resolve(f)) for f in found]
            for f, obj in made:
                register(f.group, f.name, obj, f.dist)
        except PluginError as e:
            _failure = e
            raise


def discover(group: str, every: Any = None) -> list[Found]:
    """The entry points of `group` in every installed distribution (`every`: those
    importlib.metadata listed, read once: EntryPoints, or Python 3.10's SelectableGroups;
    a distribution found twice on the path counts once, as it lists them)."""
    out = []
    for ep in (every if every is not None else metadata.entry_points()).select(group=group):
        dist = ep.dist.name if ep.dist is not None else "an unnamed distribution"
        out.append(Found(group, ep.name, ep.value, dist, ep))
    return out


def _builtin_names(group: str) -> set[str]:
    """The names of `group`'s table that no distribution brought."""
    names: dict[str, set[str]] = {
        CHECKS_GROUP: set(CHECKS), TRANSPORTS_GROUP: set(TABLE), LEDGER_GROUP: set(BACKENDS),
        REPORTS_GROUP: {w.what for w in publish.WRITERS}}
    return names[group] - set(ORIGINS[group])


def refuse_duplicates(found: list[Found]) -> None:
    """PluginError when two distributions claim one name of a group, or one claims a
    built-in name (a ledger scheme in any case: schemes are read lower-case)."""
    problems = []
    seen: dict[tuple[str, str], Found] = {}
    for f in found:
        key = (f.group, f.name.lower() if f.group == LEDGER_GROUP else f.name)
        if key[1] in _builtin_names(f.group) or key[1] in ORIGINS[f.group]:
            owner = ORIGINS[f.group].get(key[1], BUILT_IN)
            problems.append(f"{f.group} {f.name!r} of {f.dist} ({f.target}): {owner} "
                            "already has that name; uninstall one, or rename it")
        elif key in seen and seen[key].dist != f.dist:
            problems.append(f"{f.group} {f.name!r} is claimed by two distributions: "
                            f"{seen[key].dist} ({seen[key].target}) and {f.dist} "
                            f"({f.target}); uninstall one")
        seen.setdefault(key, f)
    if problems:
        raise PluginError("installed extensions refused:\n  " + "\n  ".join(problems))


def resolve(f: Found) -> Any:
    """The object `f` names, imported; PluginError naming it when it does not import, or,
    as root, when its code is not root's alone (core/rootfiles.py)."""
    problem = untrusted_code(f) if running_as_root() else ""
    if problem:
        raise PluginError(f"{f.group} {f.name!r} of {f.dist}: {problem}")
    try:
        return f.entry.load() if f.entry is not None else None
    except Exception as e:  # a distribution's own code: any error is its author's
        raise PluginError(f"{f.group} {f.name!r} of {f.dist}: {f.target} does not import: "
                          f"{type(e).__name__}: {e}") from None


def untrusted_code(f: Found) -> str:
    """Why root may not import `f`'s code, or '': every module and .pth file of its
    distribution, and every file of the top-level package its target names (an editable
    install's code lies outside the distribution's own list), must be root's alone. Read,
    never run: a top-level package is located without importing it."""
    paths: list[str] = []
    dist = f.entry.dist if f.entry is not None else None
    for p in (dist.files or []) if dist is not None else []:
        if p.suffix in (".py", ".pth", ".so") or p.name == "entry_points.txt":
            paths.append(str(p.locate()))
    top = f.target.split(":")[0].split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None  # said by resolve() when it imports
    if spec is not None and spec.origin and spec.origin not in ("built-in", "frozen"):
        paths.append(spec.origin)
    for where in (spec.submodule_search_locations or []) if spec is not None else []:
        for dirpath, _, names in os.walk(where):
            paths += [os.path.join(dirpath, n) for n in names if n.endswith((".py", ".so"))]
    for path in paths[:MAX_CODE_FILES]:
        problem = untrusted(path)
        if problem:
            return refusal("the code of", path, problem)
    if len(paths) > MAX_CODE_FILES:
        return f"its code is more than {MAX_CODE_FILES} files, more than root checks"
    return ""


def register(group: str, name: str, obj: Any, dist: str = "this process") -> None:
    """Put `obj` in `group`'s table under `name`, as an entry point of distribution `dist`
    would be (the loader's own step; a test or a conftest may call it for code it holds):
    PluginError for a name the table has, or an object the group does not take."""
    if group not in GROUPS:
        raise PluginError(f"no such seam {group!r}: one of {', '.join(GROUPS)}")
    key = name.lower() if group == LEDGER_GROUP else name
    if key in _builtin_names(group) or key in ORIGINS[group]:
        owner = ORIGINS[group].get(key, BUILT_IN)
        raise PluginError(f"{group} {name!r} of {dist}: {owner} already has that name; "
                          "uninstall one, or rename it")
    _ADDERS[group](name, obj, f"{group} {name!r} of {dist}")
    ORIGINS[group][key] = dist


def installed(group: str) -> list[str]:
    """The names of `group` that installed distributions (or register()) added."""
    return list(ORIGINS[group])


def _add_check(name: str, obj: Any, what: str) -> None:
    if not isinstance(obj, Check):
        raise PluginError(f"{what}: {type(obj).__name__} is not a burnin.api.Check")
    if obj.name != name or not name.isidentifier():
        raise PluginError(f"{what}: its Check is named {obj.name!r}; a check's entry point "
                          "is its name, a Python identifier (its test is test_<name>)")
    if (shipped("probes") / f"{obj.probe_name}.py").exists():
        raise PluginError(f"{what}: its probe name {obj.probe_name!r} is a shipped probe's; "
                          "give the check a probe of its own (Check.probe_path)")
    if not obj.probe_path or not Path(obj.probe_path).is_file():
        raise PluginError(f"{what}: its probe file {obj.probe_path!r} is not there "
                          "(Check.probe_path: the probe's path inside its distribution)")
    check_table.add(obj)


def _add_transport(name: str, obj: Any, what: str) -> None:
    if isinstance(obj, type) and issubclass(obj, (Transport, Launcher)):
        obj = TransportRow(obj, launcher=issubclass(obj, Launcher))
    if not isinstance(obj, TransportRow) or not (
            isinstance(obj.target, type) and issubclass(obj.target, (Transport, Launcher))):
        raise PluginError(f"{what}: not a Transport or Launcher subclass, nor a TransportRow "
                          "of one")
    if not name.isidentifier():
        raise PluginError(f"{what}: a transport's name is a Python identifier (an "
                          "inventory key names its settings)")
    TABLE[name] = obj


def _add_backend(name: str, obj: Any, what: str) -> None:
    if not (isinstance(obj, type) and issubclass(obj, Backend)):
        raise PluginError(f"{what}: not a burnin.api.Backend subclass")
    if not name.isidentifier():
        raise PluginError(f"{what}: a ledger's scheme is letters, digits and _")
    BACKENDS[name.lower()] = obj


def _add_writer(name: str, obj: Any, what: str) -> None:
    if callable(obj) and not isinstance(obj, ReportWriter):
        obj = ReportWriter(name, obj)
    if not isinstance(obj, ReportWriter):
        raise PluginError(f"{what}: not a ReportWriter, nor a function of a Published")
    # Its name is what the run's problems call it, and what a duplicate is judged by.
    publish.WRITERS.append(replace(obj, what=name))


_ADDERS: dict[str, Callable[[str, Any, str], None]] = {
    CHECKS_GROUP: _add_check, TRANSPORTS_GROUP: _add_transport,
    LEDGER_GROUP: _add_backend, REPORTS_GROUP: _add_writer,
}

__all__ = ["GROUPS", "Found", "Published", "installed", "load", "register"]
