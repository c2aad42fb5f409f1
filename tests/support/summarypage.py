"""What the summary.html tests read a page with: its HTML parsed (rows, tiles, links,
sections written in, sections kept compressed), headless Chromium (the page after its
script ran; screenshots), and a PNG decoder to count what a screenshot shows."""

from __future__ import annotations

import base64
import gzip
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from burnin.report.summary.script import HTML_SAFE

REPO = Path(__file__).resolve().parent.parent.parent
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars"]
needs_chromium = pytest.mark.skipif(not shutil.which("chromium") and not os.environ.get("CI"),
                                    reason="needs Debian's chromium (CI installs it)")


def synthetic():
    """benchmarks/summary_render.py, whose synthetic fleets the tests share."""
    spec = importlib.util.spec_from_file_location("summary_render",
                                                  REPO / "benchmarks" / "summary_render.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Summary(HTMLParser):
    """summary.html as its parts: table rows, grid tiles, links, sections, scripts."""

    def __init__(self, path: Path):
        super().__init__()
        self.rows, self.tiles, self.links, self.sections = [], {}, [], []
        self.row_links: dict[str, list[str]] = {}
        self.scripts: dict[str, str] = {}
        self.svgs = self.circles = self.polylines = 0
        self._row = self._script = None
        self._in_grid = False
        self.text = path.read_text(encoding="utf-8")
        self.feed(self.text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section" and a.get("id") == "grid":
            self._in_grid = True
        elif tag == "section" and a.get("id", "").startswith("n-"):
            self.sections.append(a["id"][2:])
        elif tag == "tr" and a.get("id", "").startswith("node-"):
            self._row = a["id"][5:]
            self.rows.append(self._row)
        elif tag == "a" and a.get("href") is not None:
            self.links.append(a["href"])
            if self._in_grid and a["href"].startswith("#n-"):
                self.tiles[a["href"][3:]] = a.get("title", "")
            if self._row:
                self.row_links.setdefault(self._row, []).append(a["href"])
        elif tag == "script" and a.get("id"):
            self._script = a["id"]
        self.svgs += tag == "svg"
        self.circles += tag == "circle"
        self.polylines += tag == "polyline"

    def handle_endtag(self, tag):
        if tag == "section":
            self._in_grid = False
        elif tag == "tr":
            self._row = None
        elif tag == "script":
            self._script = None

    def handle_data(self, data):
        if self._script:
            self.scripts[self._script] = self.scripts.get(self._script, "") + data

    def packed(self, element_id: str):
        unsafe = {v: k for k, v in HTML_SAFE.items()}
        blob = base64.b85decode(self.scripts[element_id].strip().translate(unsafe))
        return json.loads(gzip.decompress(blob))

    def lazy(self) -> dict[str, dict]:
        """The sections kept compressed: {node: section data}."""
        if "sections-index" not in self.scripts:
            return {}
        index = json.loads(self.scripts["sections-index"].replace("<\\/", "</"))
        out = {}
        for i in range(len(index["c"])):
            out.update(self.packed(f"sections-{i}"))
        return out


def chromium(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CHROMIUM + [f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                                      *args, url], capture_output=True, text=True, timeout=180)


def drawn_dom(page: Path, profile: Path, node: str = "") -> str:
    """The page's DOM after its script drew the sections (and node's, when given)."""
    res = chromium(page.as_uri() + (f"#n-{node}" if node else ""), profile, "--dump-dom")
    assert 'data-ready="1"' in res.stdout, res.stderr[-2000:]
    return res.stdout


def screenshot(page: Path, shot: Path, profile: Path, size: str = "1200,1400",
               only: str = "") -> bytes:
    """A PNG of the page's top; with `only` a node, of that node's section alone (a
    screenshot scrolled to an anchor comes back blank in headless Chromium)."""
    url = page.as_uri()
    if only:
        view = page.with_name(f"view-{only}.html")
        view.write_text(page.read_text(encoding="utf-8") + (
            f"<style>body>*{{display:none!important}}body>#n-{only},#drawn{{display:block!"
            f"important}}#drawn>:not(#n-{only}){{display:none!important}}</style>"),
            encoding="utf-8")
        url = view.as_uri() + f"#n-{only}"
    res = chromium(url, profile, f"--window-size={size}", f"--screenshot={shot}")
    assert shot.exists(), res.stderr[-2000:]
    return shot.read_bytes()


def pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA PNG, as Chromium writes."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(png):
        size, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + size]
        if kind == b"IHDR":
            w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and not interlace
        elif kind == b"IDAT":
            idat += body
        pos += 12 + size
    raw, bpp = zlib.decompress(idat), 4 if colour == 6 else 3
    stride, prev, rows = w * bpp, bytearray(w * bpp), []
    for y in range(h):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev, strict=True))
        elif kind == 3:
            for i in range(stride):
                line[i] = (line[i] + (((line[i - bpp] if i >= bpp else 0) + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a, b = (line[i - bpp] if i >= bpp else 0), prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        if bpp == 4:
            rgb = bytearray(w * 3)
            for k in range(3):
                rgb[k::3] = line[k::4]
            line = rgb
        rows.append(bytes(line))
    return w, h, rows


def count_colour(rows: list[bytes], rgb: tuple[int, int, int], within: int = 40) -> int:
    """Pixels within `within` of a colour on every channel (antialiased edges count)."""
    r0, g0, b0 = rgb
    return sum(1 for row in rows for r, g, b in zip(row[0::3], row[1::3], row[2::3], strict=True)
               if abs(r - r0) <= within and abs(g - g0) <= within and abs(b - b0) <= within)


def count_ink(rows: list[bytes]) -> int:
    """Coloured pixels (a chart's lines and dots, not its black text or grey grid)."""
    return sum(1 for row in rows for r, g, b in zip(row[0::3], row[1::3], row[2::3], strict=True)
               if max(r, g, b) - min(r, g, b) > 60)
