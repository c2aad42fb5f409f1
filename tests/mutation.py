"""Mutation testing of the modules that decide, against the fast tier
(docs/developer/testing.md).

    python tests/mutation.py                  # every module, one at a time, then the score
    python tests/mutation.py checks.sdc gate.quarantine  # these modules only (keeps other results)
    python tests/mutation.py --score [--survivors] [--markdown]   # the last results
    python tests/mutation.py --slow checks.health   # its "no tests" mutants, by the slow tier

mutmut (the `mutation` extra: pip install -e '.[node,test,mutation]'; configured in
pyproject.toml, [tool.mutmut]) copies the code to mutants/, makes each mutant, and runs
against it the fast-tier tests that reach the mutated function. A mutant is killed when a
test fails; a timeout (the mutant hung a test past its limit) counts as caught, shown apart.
A module's mutants that no fast-tier test reaches ("no tests") are run again, with --slow,
against the slow-tier test files SLOW names for it; the score counts those results in their
place. Every survivor is either killed by a new test or listed with its reason in
tests/equivalent_mutants.txt.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULES = ("gate.admit", "gate.quarantine", "ledger.api", "ledger.read", "ledger.runs",
           "figures.track_record", "figures.goodput", "probe.shapes",
           "model.verdict", "probe.protocol", "core.safetext", "checks.base",
           "checks.sdc", "checks.burn", "checks.health", "checks.storage", "checks.allreduce",
           "checks.allreduce_internode",
           "checks.memory", "checks.pcie", "checks.fabric", "checks.dcgm", "checks.dcgm_codes",
           "checks.gpu_fabric", "checks.train", "checks.train_job", "checks.train_internode",
           "gate.incidents",
           "ledger.open", "ledger.run_end")
# Modules mutated in part: these functions only. allreduce_internode's inter-node run
# (internode, _outcome: groups, pairs, retests over real nodes) is tested on real SSH hosts
# (tests/test_allreduce.py), which the fast tier cannot reach: a first run over all of it
# caught 12% (47 of 389), all of its judge's mutants among the missed ones. `excluded`
# is checks/group_outcomes.py's now, shared with collectives_internode.
ONLY = {"checks.allreduce_internode": ("judge", "figures")}
# The slow tier, for what the fast tier cannot reach. checks.health's facts (facts_gpus,
# facts_equipped, facts_baseline) are read by the run's engine alone, before the other
# checks: only a suite run reaches them. These tests run suites in-process (pytester), so
# mutmut sees which of them reach each function: an auto node's GPU count, dcgmi found or
# absent, the fabric counters read before the load. Each runs again for every mutant it
# reaches: the cheapest that prove these (not the plugin's [xdist] case, whose worker
# processes mutmut's stats cannot follow).
SLOW = {"checks.health": (
    "tests/test_plugin.py::test_auto_nodes_are_probed_at_collection_only_for_a_gpu_only_check",
    "tests/test_dcgm.py::test_dcgm_fails_the_node_whose_diag_failed_and_passes_where_absent",
    "tests/test_fabric.py::test_counters_grown_since_health_fail_and_the_window_is_the_runs")}
SLOW_RESULTS = REPO / "mutants" / "slow-tier.json"
# mutmut's exit codes (mutmut/stats.py), by what they mean here.
KILLED = {1, 3}
TIMEOUT = {36, -24, 24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}


def status(code) -> str:
    if code in KILLED:
        return "killed"
    if code in TIMEOUT:
        return "timeout"
    if code in SURVIVED:
        return "survived"
    if code in NO_TESTS:
        return "no tests"
    return "not checked" if code is None else f"other ({code})"


EQUIVALENT = REPO / "tests" / "equivalent_mutants.txt"
# SQLite reads keywords and names in any case, and Python codec names likewise: a mutant
# that only changes the case of such a string changes nothing (an SQL text is one that
# starts with a statement's keyword).
CASE_BLIND = re.compile(r"(select|insert|update|delete|pragma|begin|commit|rollback|alter|"
                        r"create|values|where|order by|utf-8)\b", re.IGNORECASE)


def functions(module: str) -> dict[str, str]:
    """{mutant or original function name: its source} in mutants/ for `module`."""
    path = REPO / "mutants" / (module.replace(".", "/") + ".py")
    src = path.read_text()
    lines = src.splitlines(keepends=True)  # once: ast.get_source_segment splits per call
    return {n.name: "".join(lines[n.lineno - 1:n.end_lineno]) for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.FunctionDef) and "__mutmut_" in n.name}


def _strings(tree) -> list:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def case_only(orig: str, mutant: str) -> bool:
    """The mutant only changes the case of an SQL text or a codec name."""
    a, b = ast.parse(textwrap.dedent(orig)), ast.parse(textwrap.dedent(mutant))
    sa, sb = _strings(a), _strings(b)
    if len(sa) != len(sb):
        return False
    changed = [(x.value, y.value) for x, y in zip(sa, sb, strict=True) if x.value != y.value]
    for node in sa + sb:
        node.value = node.value.lower()
    renamed = ast.dump(b).replace(_name(mutant), _name(orig))
    return bool(changed) and ast.dump(a) == renamed and all(
        x.lower() == y.lower() and CASE_BLIND.match(x.strip()) for x, y in changed)


def _body(src: str) -> str:
    """A function's text past its def line."""
    return src.split("\n", 1)[1] if "\n" in src else ""


def _name(src: str) -> str:
    return src.split("def ", 1)[1].split("(", 1)[0]


def listed() -> dict[str, tuple[str, str]]:
    """{mutant: (what its code must hold, reason)} from tests/equivalent_mutants.txt."""
    out, reason = {}, ""
    for raw in EQUIVALENT.read_text().splitlines():
        line = raw.strip()
        if line.startswith("## "):
            reason = line[3:]
        elif line and not line.startswith("#"):
            name, _, holds = line.partition(" ")
            out[name] = (holds.strip(), reason)
    return out


def _holds(fns: dict[str, str], name: str, holds: str) -> bool:
    """Mutant `name` holds the text `holds` in its body and its original does not."""
    mutant = fns.get(name)
    orig = fns.get(name.rsplit("__mutmut_", 1)[0] + "__mutmut_orig")
    return bool(mutant and orig and holds and holds in _body(mutant)
                and holds not in _body(orig))


def pinned(module: str, known: dict, fns: dict[str, str]) -> dict[str, str]:
    """{mutant of `module`: the line of tests/equivalent_mutants.txt that names it}. A line
    names its own mutant when that one holds its text; after an edit above it renumbered
    the function's mutants, the one mutant of the same function that holds the text (the
    text pins the mutation, the number only finds it); a text that no mutant of the
    function holds, or several do, names none."""
    out = {}
    for line, (holds, _) in known.items():
        if line.rsplit(".", 1)[0] != module:
            continue
        func = line.rsplit(".", 1)[1]
        if _holds(fns, func, holds):
            out[func] = line
            continue
        base = func.rsplit("__mutmut_", 1)[0] + "__mutmut_"
        found = [n for n in fns if n.startswith(base) and not n.endswith("__mutmut_orig")
                 and n[len(base):].isdigit() and _holds(fns, n, holds)]
        if len(found) == 1:
            out.setdefault(found[0], line)
    return out


def explain(key: str, known: dict, cache: dict) -> tuple[str, str] | None:
    """(why surviving mutant `key` is equivalent, the listed line that says so), or None
    (it must be killed)."""
    module = key.rsplit(".", 1)[0]
    if module not in cache:
        fns = functions(module)
        cache[module] = (fns, pinned(module, known, fns))
    fns, lines = cache[module]
    func = key.rsplit(".", 1)[1]
    mutant, orig = fns.get(func), fns.get(func.rsplit("__mutmut_", 1)[0] + "__mutmut_orig")
    if mutant is None or orig is None:
        return None
    if case_only(orig, mutant):
        return "SQL and codec names are case-blind", ""
    line = lines.get(func)
    return (known[line][1], line) if line else None


def score(argv: list[str]) -> int:
    root = REPO / "mutants"
    metas = sorted(root.rglob("*.py.meta"))
    if not metas:
        print("no results under mutants/: run `python tests/mutation.py` first", file=sys.stderr)
        return 2
    known, cache = listed(), {}
    slow = _slow_results()
    rows, unexplained, used, scored, renumbered = [], [], set(), set(), []
    total: Counter = Counter()
    for meta in metas:
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if all(c is None for c in codes.values()):
            continue  # a module no run has tested (not one of MODULES)
        module = str(meta.relative_to(root))[: -len(".meta")]
        scored.add(module[: -len(".py")].replace("/", "."))
        only = ONLY.get(module[len("burnin/"):-len(".py")].replace("/", "."))
        if only:
            codes = {k: c for k, c in codes.items()
                     if k.rsplit(".", 1)[1].split("__mutmut_")[0] in {f"x_{f}" for f in only}}
            module += f" ({', '.join(only)})"
        by_slow = {k: slow[k] for k, c in codes.items() if status(c) == "no tests" and k in slow}
        if by_slow:
            codes = {**codes, **by_slow}
            module += f" ({len(by_slow)} by the slow tier)"
        counts: Counter = Counter()
        for key, code in codes.items():
            state = status(code)
            if state == "survived":
                why = explain(key, known, cache)
                if why is not None:
                    state = "equivalent"
                    used.add(why[1])
                    if why[1] and why[1] != key:
                        renumbered.append(f"{why[1]} is now {key.rsplit('.', 1)[1]}")
                else:
                    unexplained.append(key)
            elif state not in ("killed", "timeout"):
                unexplained.append(key)
            counts[state] += 1
        total.update(counts)
        rows.append((module, counts, len(codes)))
    md = "--markdown" in argv

    def line(name, counts, n):
        caught = counts["killed"] + counts["timeout"]
        raw = 100.0 * caught / n if n else 100.0
        real = n - counts["equivalent"]
        pct = 100.0 * caught / real if real else 100.0
        rest = n - caught - counts["survived"] - counts["equivalent"]
        if md:
            return (f"| {name} | {n} | {counts['killed']} | {counts['timeout']} | "
                    f"{counts['equivalent']} | {counts['survived']} | {rest} | {raw:.1f}% | "
                    f"{pct:.1f}% |")
        return (f"{name:28} {n:4} killed {counts['killed']:4}  timeout {counts['timeout']:2}  "
                f"equivalent {counts['equivalent']:2}  survived {counts['survived']:2}  "
                f"not run {rest:2}  raw {raw:5.1f}%  score {pct:5.1f}%")
    if md:
        print("| module | mutants | killed | timeout | equivalent | survived | not run | raw | "
              "score |")
        print("|---|---|---|---|---|---|---|---|---|")
    for name, counts, n in rows:
        print(line(name, counts, n))
    print(line("**all**" if md else "all", total, sum(n for *_, n in rows)))
    # Only the modules scored here: a run of some modules leaves the others' lines alone.
    stale = sorted(k for k in set(known) - used if k.rsplit(".", 1)[0] in scored)
    if renumbered:
        print(f"\n{len(renumbered)} listed as equivalent under an old number, found by their "
              f"text (renumber them in {EQUIVALENT.name}):\n  " + "\n  ".join(renumbered))
    if stale:
        print(f"\n{len(stale)} listed as equivalent but not a surviving mutant with that code "
              f"(killed now, or renumbered): edit {EQUIVALENT.name}:\n  " + "\n  ".join(stale))
    if unexplained:
        print(f"\n{len(unexplained)} mutants neither killed nor explained as equivalent"
              + (":\n  " + "\n  ".join(sorted(unexplained)) if "--survivors" in argv
                 else " (--survivors lists them)"))
    return 1 if unexplained or stale else 0


def run(modules: list[str]) -> int:
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        print(f"not a module that decides: {', '.join(unknown)}; expected some of: "
              f"{', '.join(MODULES)}", file=sys.stderr)
        return 2
    if not modules and (REPO / "mutants").exists():
        shutil.rmtree(REPO / "mutants")  # a whole run starts clean: stats of today's tests
    for module in modules:
        # mutmut keeps a module's results while its source is unchanged: a mutant that
        # survived yesterday's tests would still be listed after today's test kills it
        stem = REPO / "mutants" / "burnin" / (module.replace(".", "/") + ".py")
        for path in (stem, stem.with_name(stem.name + ".meta"),
                     stem.with_name(stem.name + ".spans"),
                     REPO / "mutants" / "mutmut-stats.json"):
            path.unlink(missing_ok=True)
        _drop_slow(module)
    children = os.environ.get("MUTMUT_CHILDREN", "2")
    for module in modules or MODULES:
        print(f"== burnin.{module}", flush=True)
        patterns = [f"burnin.{module}.x_{f}__mutmut_*" for f in ONLY[module]] \
            if module in ONLY else [f"burnin.{module}.*"]
        res = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children",
                              children, *patterns], cwd=REPO,
                             stdout=subprocess.DEVNULL)
        if res.returncode != 0:
            print(f"mutmut failed on burnin.{module} (status {res.returncode}); run it by "
                  f"hand to see why: mutmut run 'burnin.{module}.*'", file=sys.stderr)
            return res.returncode
    return score([])


def _slow_results(keep: dict | None = None) -> dict:
    """The slow tier's kept {mutant: exit code}; with `keep`, write that instead first."""
    if keep is not None:
        SLOW_RESULTS.write_text(json.dumps(keep, indent=1, sort_keys=True))
    return json.loads(SLOW_RESULTS.read_text()) if SLOW_RESULTS.exists() else {}


def _drop_slow(module: str) -> None:
    """Forget the slow tier's results for `module`: they were for its last fast run."""
    if SLOW_RESULTS.exists():
        _slow_results({k: c for k, c in _slow_results().items()
                       if not k.startswith(f"burnin.{module}.")})


def _slow_config(module: str) -> str:
    """pyproject.toml's text for a slow-tier run of `module`: the slow tier's tests as
    mutmut's test selection, `module` alone mutated, and no fast-tier Hypothesis profile
    (tests/fast/conftest.py registers it; the slow tests do not load that conftest)."""
    text = (REPO / "pyproject.toml").read_text()
    edits = ((r"(?m)^pytest_add_cli_args_test_selection = .*$",
              "pytest_add_cli_args_test_selection = " + json.dumps(list(SLOW[module]))),
             (r"(?ms)^only_mutate = \[.*?\]$",
              "only_mutate = " + json.dumps([f"burnin/{module.replace('.', '/')}.py"])),
             (r'"--hypothesis-profile=mutation",\s*', ""))
    for pattern, replacement in edits:
        text, n = re.subn(pattern, replacement, text, count=1)
        if n != 1:
            raise SystemExit(f"pyproject.toml: [tool.mutmut] has nothing matching {pattern!r} "
                             "to replace for the slow tier")
    return text


def run_slow(modules: list[str]) -> int:
    """Run each module's "no tests" mutants of its last fast run against SLOW's files.

    mutmut reads its configuration from the working directory: it runs in a scratch
    directory that links to this checkout, beside a pyproject.toml naming the slow files.
    """
    unknown = [m for m in modules if m not in SLOW]
    if not modules or unknown:
        print(f"--slow takes modules with slow-tier tests: {', '.join(SLOW)}", file=sys.stderr)
        return 2
    children = os.environ.get("MUTMUT_CHILDREN", "2")
    for module in modules:
        meta = REPO / "mutants" / "burnin" / (module.replace(".", "/") + ".py.meta")
        if not meta.exists():
            print(f"no fast-tier results for {module}: run `python tests/mutation.py {module}` "
                  "first", file=sys.stderr)
            return 2
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        names = sorted(k for k, c in codes.items() if status(c) == "no tests")
        print(f"== burnin.{module}: {len(names)} mutants no fast-tier test reaches, against "
              f"{' '.join(SLOW[module])}", flush=True)
        _drop_slow(module)
        if not names:
            continue
        with tempfile.TemporaryDirectory(prefix="burnin-mutation-slow-") as tmp:
            scratch = Path(tmp)
            for entry in REPO.iterdir():
                if entry.name not in ("mutants", ".git", "pyproject.toml"):
                    (scratch / entry.name).symlink_to(entry)
            (scratch / "pyproject.toml").write_text(_slow_config(module))
            res = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children",
                                  children, *names], cwd=scratch, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
            if res.returncode != 0:
                print(f"mutmut failed on the slow tier of burnin.{module} (status "
                      f"{res.returncode}):\n{res.stdout[-3000:]}", file=sys.stderr)
                return res.returncode
            got = json.loads((scratch / "mutants" / meta.relative_to(REPO / "mutants"))
                             .read_text())["exit_code_by_key"]
        _slow_results({**_slow_results(), **{k: got.get(k) for k in names}})
    return score([])


def main(argv: list[str]) -> int:
    if "--score" in argv:
        return score(argv)
    if importlib.util.find_spec("mutmut") is None:
        print("mutmut is not installed: it is the `mutation` extra, "
              "pip install -e '.[node,test,mutation]'", file=sys.stderr)
        return 2
    if "--slow" in argv:
        return run_slow([a for a in argv if not a.startswith("-")])
    return run([a for a in argv if not a.startswith("-")])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
