"""summary.html's first render at fleet scale: what a big fleet's page leaves out of the
DOM it is first drawn with, and what it draws when asked (the folded verdict table when
opened). Structure, not timing: the timing is benchmarks/summary_render.py's."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from support.summarypage import CHROMIUM, Summary, needs_chromium, synthetic

from burnin.report.publish import publish
from burnin.report.summary import page as page_mod

bench = synthetic()


def published(tmp_path, nodes=12):
    run = tmp_path / "reports" / "20261122T120000Z-now"
    verdicts, inventory = bench.synthetic_run(run, nodes, 30, failing=2,
                                              kinds=("thermal", "storage"))
    publish(run, "synthetic", run.name, verdicts, bench.floors(verdicts), nodes=inventory)
    return run / "summary.html", verdicts


@pytest.fixture
def folded(monkeypatch):
    """A fleet of 12 counts as too big for an open table."""
    monkeypatch.setattr(page_mod, "TABLE_OPEN", 5)


def test_a_folded_tables_rows_are_text_to_a_browser_until_it_is_opened(tmp_path, folded):
    html, verdicts = published(tmp_path)
    text = html.read_text(encoding="utf-8")
    # With scripting on, a noscript's content is raw text: none of its rows is an element
    # of the DOM the page is first drawn with.
    start = text.index("<noscript id='table-rows'>")
    end = text.index("</noscript>", start)
    rows = [m.start() for m in re.finditer(r"<tr id='node-", text)]
    assert len(rows) == len(verdicts) and all(start < at < end for at in rows)
    # Without JavaScript the table is the one an open table would be: every node's row,
    # its failure and evidence linked.
    page = Summary(html)
    assert sorted(page.rows) == sorted(verdicts)
    bad = [n for n, v in verdicts.items() if any(o != "passed" for o, _ in v.values())]
    assert all(f"nodes/{n}/verdicts.txt" in page.row_links[n] for n in bad)


def test_an_open_table_is_written_as_elements(tmp_path):
    html, verdicts = published(tmp_path)
    text = html.read_text(encoding="utf-8")
    assert "id='table-rows'" not in text and "<details id='table' open>" in text
    assert sorted(Summary(html).rows) == sorted(verdicts)


def _in_browser(html, tmp_path, steps: str) -> dict:
    """What `steps` (a script's statements, run after the load event, ending with
    `done(value)`) found in the page, read back through the document's title."""
    probe = html.with_name("probe.html")
    probe.write_text(html.read_text(encoding="utf-8") + (
        "<script>const done=v=>document.title='R='+JSON.stringify(v);"
        f"addEventListener('load',()=>setTimeout(async()=>{{{steps}}},0))</script>"),
        encoding="utf-8")
    res = subprocess.run(CHROMIUM + [f"--user-data-dir={tmp_path / 'profile'}",
                                     "--virtual-time-budget=10000", "--dump-dom",
                                     probe.as_uri()], capture_output=True, text=True, timeout=180)
    title = re.search(r"<title>R=([^<]*)</title>", res.stdout)
    assert title, res.stderr[-2000:]
    return json.loads(title.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@needs_chromium
def test_the_folded_table_is_drawn_when_opened_and_sorts(tmp_path, folded):
    html, verdicts = published(tmp_path)
    got = _in_browser(html, tmp_path, """
        const rows=()=>document.querySelectorAll('tr[id^="node-"]').length;
        const before=rows();
        const t=document.getElementById('table');t.open=true;
        await new Promise(r=>t.addEventListener('toggle',()=>setTimeout(r,0),{once:true}));
        const after=rows();
        document.querySelector('#nodes th').click();document.querySelector('#nodes th').click();
        done({before,after,first:document.querySelector('#nodes tbody tr').id,
              left:document.querySelectorAll('#table-rows').length})""")
    assert got["before"] == 0, "the folded table's rows were in the DOM at load"
    assert got["after"] == len(verdicts) and got["left"] == 0
    assert got["first"] == "node-" + max(verdicts), "a click on a column does not sort"


def test_a_big_fleets_grid_groups_and_sections_are_laid_out_only_near_the_screen(
        tmp_path, monkeypatch):
    monkeypatch.setattr(page_mod, "DRAW_ALL", 5)
    html, _ = published(tmp_path, nodes=70)  # three racks
    page = Summary(html)
    # Off the screen a rack's group and a node's section are neither laid out nor
    # painted: 25,000 tiles and the sections drawn at load were most of a first frame.
    assert ".grp{content-visibility:auto}" in page.text
    assert "section.node{content-visibility:auto;" in page.text
    boxes = re.findall(r"<div class='grp' style='width:(\d+)px;contain-intrinsic-size:auto "
                       r"(\d+)px auto (\d+)px'>", page.text)
    assert len(boxes) == 3 and all(w == held for w, held, _ in boxes)
    # The sections drawn at load lie below the fold: drawn after the first frame.
    index = json.loads(page.scripts["sections-index"])
    assert index["later"] == 1


def test_a_small_fleets_sections_are_drawn_before_its_first_frame(tmp_path):
    page = Summary(published(tmp_path, nodes=4)[0])
    index = json.loads(page.scripts["sections-index"])
    assert index["later"] == 0 and len(index["open"]) + len(page.sections) == 4


@needs_chromium
def test_a_groups_place_held_off_the_screen_is_its_size_drawn(tmp_path):
    html, _ = published(tmp_path, nodes=70)
    got = _in_browser(html, tmp_path, """
        done([...document.querySelectorAll('.grp')].map(g=>[g.getBoundingClientRect().height,
              +g.style.containIntrinsicSize.split(' ').pop().replace('px','')]))""")
    assert len(got) == 3
    for drawn, held in got:  # a placeholder that is wrong shifts the grid as it scrolls
        assert abs(drawn - held) <= 3, got
