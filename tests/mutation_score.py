"""The mutation score per module from mutmut's results (mutants/**/*.py.meta), after
`mutmut run` (TESTING.md). Killed counts a mutant a test failed on; a timeout (the
mutant hung a test past its time limit) counts as caught, and is shown apart.

    python tests/mutation_score.py [--survivors] [--markdown]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

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


def main(argv: list[str]) -> int:
    root = Path("mutants")
    metas = sorted(root.rglob("*.py.meta"))
    if not metas:
        print("no results under mutants/: run `mutmut run` first", file=sys.stderr)
        return 2
    rows, survivors = [], []
    total = Counter()
    for meta in metas:
        codes = json.loads(meta.read_text())["exit_code_by_key"]
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
        return (f"{name:32} killed {counts['killed']:5} timeout {counts['timeout']:3} "
                f"survived {counts['survived']:4} other {rest:4}  {caught}/{n} {pct:5.1f}%")
    if md:
        print("| module | killed | timeout | survived | not run | caught/total | score |")
        print("|---|---|---|---|---|---|---|")
    for name, counts, n in rows:
        print(line(name, counts, n))
    print(line("**all**" if md else "all", total, sum(n for *_, n in rows)))
    if "--survivors" in argv:
        print("\n".join(sorted(survivors)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
