"""summary.html draws the floors the judges used, and no others: an inventory's
all-reduce `min_busbw_gbps` and a node group's own burn `min_tflops` are read back from
the page and from the verdicts' failure messages, and must be the same numbers."""

from __future__ import annotations

import json
import re
import textwrap

from support.replay import replay_python
from support.suiterun import junit_cases, run_suite
from support.summarypage import Summary

from burnin import cli

# Floors far above what the replayed CPU documents measure: every device fails, so each
# verdict states, in its message, the floor it was judged against.
INVENTORY = """\
    version: 1
    cluster: floors
    defaults: {transport: local, gpus: 0, cpu_devices: 2, python: REPLAY}
    nodes:
      - name: a[1-2]
      - name: b1
        checks: {burn: {min_tflops: 7000}}
    checks:
      burn: {min_tflops: 5000}
      allreduce: {min_busbw_gbps: 300, peer_fraction: 0}
    """
STATED = re.compile(r"below the floor of ([0-9.]+) (TFLOPS|GB/s)")
# A reference line's text: "floor 5000 TFLOPS", "floor of b1 7000 TFLOPS",
# "floor at 1 MiB 300 GB/s"; medians, power limits and slowdowns are other names.
# The text opens an SVG title (a chart drawn inline) or a JSON string (a packed one).
DRAWN = re.compile(r"(?:<title>|\")floor(?: of \d+ nodes| of \S+| at [0-9.]+ [KMG]?i?B)? "
                   r"([0-9.]+) (TFLOPS|GB/s)")


def stated(message: str) -> set[tuple[float, str]]:
    return {(float(v), unit) for v, unit in STATED.findall(message)}


def drawn(text: str) -> set[tuple[float, str]]:
    return {(float(v), unit) for v, unit in DRAWN.findall(text)}


def test_the_page_draws_exactly_the_floors_the_verdicts_state(pytester):
    inv = pytester.path / "inv.yaml"
    inv.write_text(textwrap.dedent(INVENTORY).replace(
        "REPLAY", replay_python(pytester.path / "replay")))
    result, reports = run_suite(pytester, str(inv), "-k",
                                "burn or allreduce and not internode", "--no-quarantine")
    result.assert_outcomes(failed=6)
    cases = junit_cases(reports)
    page = Summary(reports / "latest" / "summary.html")
    lazy = page.lazy()  # a page this small draws every section inline; a large one packs

    def section(node: str) -> str:
        if node in lazy:
            return json.dumps(lazy[node], ensure_ascii=False)
        return page.text.split(f"id='n-{node}'")[1].split("</section>")[0]
    want = {"a1": {(5000.0, "TFLOPS"), (300.0, "GB/s")},
            "a2": {(5000.0, "TFLOPS"), (300.0, "GB/s")},
            "b1": {(7000.0, "TFLOPS"), (300.0, "GB/s")}}
    for node, floors in want.items():
        said = stated(cases[node]["burn"][1]) | stated(cases[node]["allreduce"][1])
        assert said == floors, cases[node]
        # The node's own section draws its own floors, no other node's.
        assert drawn(section(node)) == floors, node
    # The fleet charts draw every floor some verdict used, and no other.
    fleet = page.text.split("id='grid'")[1].split("id='n-")[0]
    assert drawn(fleet) == set().union(*want.values())
    # `burnin report`, from the run directory alone, draws the same page's floors.
    run = (reports / "latest").resolve()
    (run / "summary.html").unlink()
    assert cli.main(["report", str(run)]) == 0
    again = Summary(run / "summary.html")
    assert drawn(again.text.split("id='grid'")[1]) == drawn(page.text.split("id='grid'")[1])
