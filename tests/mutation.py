"""Mutation testing of the modules that decide, against the fast tier (TESTING.md).

    python tests/mutation.py                  # every module, one at a time, then the score
    python tests/mutation.py checks.sdc gate  # these modules only (keeps other results)
    python tests/mutation.py --score [--survivors] [--markdown]   # the last results

mutmut (configured in pyproject.toml, [tool.mutmut]) copies the code to mutants/, makes
each mutant, and runs against it the fast-tier tests that reach the mutated function. A
mutant is killed when a test fails; a timeout (the mutant hung a test past its limit)
counts as caught, shown apart. Every survivor is either killed by a new test or listed
with its reason in TESTING.md's equivalent mutants.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULES = ("admit", "gate", "ledger", "schema", "verdict", "probe", "text", "checks.base",
           "checks.sdc", "checks.burn", "checks.health", "checks.storage", "checks.allreduce",
           "checks.memory", "checks.pcie", "checks.fabric", "checks.dcgm")
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


def score(argv: list[str]) -> int:
    root = REPO / "mutants"
    metas = sorted(root.rglob("*.py.meta"))
    if not metas:
        print("no results under mutants/: run `python tests/mutation.py` first", file=sys.stderr)
        return 2
    rows, survivors = [], []
    total: Counter = Counter()
    for meta in metas:
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if all(c is None for c in codes.values()):
            continue  # a module no run has tested (not one of MODULES)
        module = str(meta.relative_to(root))[: -len(".meta")]
        counts = Counter(status(c) for c in codes.values())
        total.update(counts)
        rows.append((module, counts, len(codes)))
        survivors += [k for k, c in codes.items() if status(c) not in ("killed", "timeout")]
    md = "--markdown" in argv

    def line(name, counts, n):
        caught = counts["killed"] + counts["timeout"]
        pct = 100.0 * caught / n if n else 100.0
        rest = n - caught - counts["survived"]
        if md:
            return (f"| {name} | {counts['killed']} | {counts['timeout']} | "
                    f"{counts['survived']} | {rest} | {caught}/{n} | {pct:.1f}% |")
        return (f"{name:28} killed {counts['killed']:4}  timeout {counts['timeout']:2}  "
                f"survived {counts['survived']:3}  not run {rest:3}  {caught}/{n} {pct:5.1f}%")
    if md:
        print("| module | killed | timeout | survived | not run | caught/total | score |")
        print("|---|---|---|---|---|---|---|")
    for name, counts, n in rows:
        print(line(name, counts, n))
    print(line("**all**" if md else "all", total, sum(n for *_, n in rows)))
    if "--survivors" in argv:
        print("\n".join(sorted(survivors)))
    return 0


def run(modules: list[str]) -> int:
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        print(f"not a module that decides: {', '.join(unknown)}; expected some of: "
              f"{', '.join(MODULES)}", file=sys.stderr)
        return 2
    if not modules and (REPO / "mutants").exists():
        shutil.rmtree(REPO / "mutants")  # a whole run starts clean: stats of today's tests
    children = os.environ.get("MUTMUT_CHILDREN", "2")
    for module in modules or MODULES:
        print(f"== burnin.{module}", flush=True)
        res = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children",
                              children, f"burnin.{module}.*"], cwd=REPO,
                             stdout=subprocess.DEVNULL)
        if res.returncode != 0:
            print(f"mutmut failed on burnin.{module} (status {res.returncode}); run it by "
                  f"hand to see why: mutmut run 'burnin.{module}.*'", file=sys.stderr)
            return res.returncode
    return score([])


def main(argv: list[str]) -> int:
    if "--score" in argv:
        return score(argv)
    return run([a for a in argv if not a.startswith("-")])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
