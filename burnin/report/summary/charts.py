"""Charts that name what they show: round ticks with units, a <title> on every point
(hover names the node and device), the extremes labelled in place, reference lines
(floor, median) drawn with their name and value.

A chart is laid out once, here, into a display list of SVG primitives in pixels. The
fleet charts are written as SVG from it (`svg`); node sections travel as data and the
page's script draws the same list (`packed`), so layout logic lives in one place and a
thousand sections cost kilobytes, not megabytes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from html import escape

PALETTE = ("#0969da", "#bc4c00", "#1a7f37", "#8250df", "#bf3989", "#0a3069", "#9a6700",
           "#57606a")
BAD, FLOOR, MEDIAN = "#cf222e", "#9a6700", "#57606a"
# Packed polylines: x in two characters (8,100 steps across the chart), y in one (90
# steps down the plot area), from this alphabet (printable, no quote, no backslash).
ALPHABET = "".join(chr(c) for c in range(35, 126) if c != 92)


def fmt(v: float) -> str:
    """A figure for people: three significant digits, never scientific notation."""
    if not math.isfinite(v):
        return str(v)
    a = abs(v)
    if a >= 100_000:
        return f"{v:,.0f}".replace(",", "\u2009")  # thin-space thousands
    if a >= 100 or v == int(v):
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def fmt_bytes(b: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= size:
            return f"{b / size:g} {unit}"
    return f"{b:g} B"


@lru_cache(maxsize=65536)  # a fleet's charts repeat their ranges
def nice_ticks(lo: float, hi: float, n: int = 5) -> tuple[float, ...]:
    """Round ticks (1, 2, 2.5, 5 x 10^k) spanning [lo, hi]; the first and last enclose it."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi <= lo:
        pad = abs(lo) * 0.05 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = 10 * mag
    for m in (1, 2, 2.5, 5):
        if m * mag >= raw * (1 - 1e-9):
            step = m * mag
            break
    first = math.floor(lo / step + 1e-9) * step
    count = math.ceil((hi - first) / step - 1e-9)
    return tuple(round(first + i * step, 12) for i in range(count + 1))


def tick_text(v: float, step: float) -> str:
    """A tick's label with as many decimals as its step needs (0.25, 2.5, 20)."""
    d = 0
    while d < 6 and abs(round(step * 10 ** d) - step * 10 ** d) > 1e-6:
        d += 1
    return f"{v:.{d}f}"


LEFT, RIGHT, TOP, BOTTOM = 50, 14, 34, 32  # the plot area's margins


@lru_cache(maxsize=4096)
def frame(w: int, h: int, title: str, legend: tuple, xt: tuple, yt: tuple, log: bool,
          xtitle: str, yunit: str) -> tuple:
    """Title, legend, grid, ticks and axis names: the same for most charts of a fleet's
    sections (every node's burn spans the same seconds), so laid out once and shared."""
    pw, ph = w - LEFT - RIGHT, h - TOP - BOTTOM
    x0, y0 = xt[0], yt[0]
    ax, ay = pw / ((xt[-1] - x0) or 1), ph / ((yt[-1] - y0) or 1)
    out: list[tuple] = [("text", LEFT, 13, title, "t", None)]
    lx = LEFT
    for name, colour in legend:
        if lx > w - 60:
            break
        out += [("rect", lx, 19, 9, 4, colour, 1, None),
                ("text", lx + 12, 25, name[:24], "s", None)]
        lx += 18 + 6 * min(len(name), 24)
    for t in yt:
        y = round(TOP + ph - (t - y0) * ay, 1)
        out += [("line", LEFT, y, w - RIGHT, y, "g", None, None, None),
                ("text", LEFT - 4, round(y + 3.5, 1), tick_text(t, yt[1] - yt[0]), "s e", None)]
    for t in xt:
        x = round(LEFT + (t - x0) * ax, 1)
        text = fmt_bytes(2.0 ** t) if log else tick_text(t, xt[1] - xt[0])
        out += [("line", x, TOP + ph, x, TOP + ph + 4, "a", None, None, None),
                ("text", x, TOP + ph + 15, text, "s m", None)]
    out += [("path", f"M{LEFT} {TOP}V{TOP + ph}H{w - RIGHT}", "a"),
            ("text", w - RIGHT, h - 3, xtitle, "s e", None),
            ("text", 4, TOP - 9, yunit, "s", None)]
    return tuple(out)


@lru_cache(maxsize=4096)
def packed_frame(*key) -> list:
    """frame() packed: one list object per distinct frame, which the page stores once."""
    return pack(list(frame(*key)))


@dataclass
class Axis:
    """One axis: its name with the unit, and how values map onto it."""

    label: str
    unit: str = ""
    log2: bool = False          # message sizes: powers of two, ticks in KiB/MiB/GiB
    zero: bool = True           # include 0 (throughput); off for temperatures and clocks
    integer: bool = False       # ranks, stream numbers: no fractional ticks
    span: float = 0.0           # the least range shown: a 15 MHz wobble is not a cliff

    def title(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


class Chart:
    """A small chart: dots with hover titles, lines, a min-max band, reference lines,
    labels next to chosen points, shaded spans (clock events), vertical marks (XIDs)."""

    def __init__(self, title: str, x: Axis, y: Axis, w: int = 560, h: int = 250):
        self.title, self.x, self.y, self.w, self.h = title, x, y, w, h
        self.dots: list[tuple[float, float, str, str]] = []
        self.lines: list[tuple[str, list[tuple[float, float]], str, float]] = []
        self.bands: list[tuple[str, list[tuple[float, float, float]], str]] = []
        self.refs: list[tuple[float, str, str]] = []
        self.labels: list[tuple[float, float, str]] = []
        self.spans: list[tuple[float, float, str, str]] = []
        self.marks: list[tuple[float, str]] = []
        self.legend: list[tuple[str, str]] = []
        self.note = ""

    def dot(self, x: float, y: float, title: str, colour: str = PALETTE[0]) -> Chart:
        self.dots.append((x, y, title, colour))
        return self

    def line(self, name: str, points: list[tuple[float, float]], colour: str,
             width: float = 1.5, legend: bool = True) -> Chart:
        if points:
            self.lines.append((name, points, colour, width))
            if legend:
                self.legend.append((name, colour))
        return self

    def band(self, name: str, points: list[tuple[float, float, float]], colour: str) -> Chart:
        """A shaded range: (x, low, high) per x."""
        if points:
            self.bands.append((name, points, colour))
            self.legend.append((name, colour))
        return self

    def ref(self, y: float | None, name: str, colour: str = FLOOR) -> Chart:
        if y is not None and math.isfinite(y):
            self.refs.append((y, name, colour))
        return self

    def label(self, x: float, y: float, text: str) -> Chart:
        self.labels.append((x, y, text))
        return self

    def span(self, x0: float, x1: float, title: str, colour: str = BAD) -> Chart:
        self.spans.append((x0, x1, title, colour))
        return self

    def mark(self, x: float, title: str) -> Chart:
        self.marks.append((x, title))
        return self

    def empty(self) -> bool:
        return not (self.dots or self.lines or self.bands)

    def _scales(self):
        xs = [d[0] for d in self.dots] + [p[0] for _, s, _, _ in self.lines for p in s] + \
             [p[0] for _, s, _ in self.bands for p in s]
        ys = [d[1] for d in self.dots] + [p[1] for _, s, _, _ in self.lines for p in s] + \
             [v for _, s, _ in self.bands for p in s for v in p[1:]] + [r[0] for r in self.refs]
        if self.x.log2:
            xs = [math.log2(x) for x in xs if x > 0] or [0.0]
        if self.y.zero:
            ys.append(0.0)
        lo, hi = min(ys), max(ys)
        if hi - lo < self.y.span:
            mid = (hi + lo) / 2
            lo, hi = mid - self.y.span / 2, mid + self.y.span / 2
        yt = nice_ticks(lo, hi, 4 if self.h < 200 else 5)
        if self.x.log2:
            lo, hi = math.floor(min(xs)), math.ceil(max(xs))
            every = max(1, math.ceil((hi - lo) / 6))
            xt = tuple(float(t) for t in range(lo - lo % every, hi + every, every))
        elif self.x.integer:  # ranks, streams: whole ticks, however few the points
            lo = math.floor(min(xs))
            hi = max(math.ceil(max(xs)), lo + 1)
            xt = nice_ticks(lo, hi, 6 if self.w > 400 else 4)
            if xt[1] - xt[0] < 1:
                xt = tuple(float(t) for t in range(lo, hi + 1))
        else:
            xt = nice_ticks(min(xs), max(xs), 6 if self.w > 400 else 4)
        return xt, yt

    def layout(self) -> list[tuple]:
        """The chart as primitives in pixels; [] when there is nothing to draw."""
        if self.empty():
            return []
        w, h = self.w, self.h
        left, right, top = LEFT, RIGHT, TOP
        pw, ph = w - LEFT - RIGHT, h - TOP - BOTTOM
        xt, yt = self._scales()
        x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]
        ax, ay = pw / ((x1 - x0) or 1), ph / ((y1 - y0) or 1)
        log = self.x.log2

        def px(x: float) -> float:
            return round(left + ((math.log2(x) if log else x) - x0) * ax, 1)

        def py(y: float) -> float:
            return round(top + ph - (y - y0) * ay, 1)
        self._frame_key = (w, h, self.title, tuple(self.legend[:10]), tuple(xt), tuple(yt), log,
                           self.x.title(), self.y.unit)
        out = list(frame(*self._frame_key))
        for a, b, title, colour in self.spans:
            out.append(("rect", px(a), top, max(round(px(b) - px(a), 1), 1.5), ph, colour, 0.18,
                        title))
        for name, band, colour in self.bands:
            ring = [(px(x), py(hi_)) for x, _, hi_ in band] + \
                   [(px(x), py(lo_)) for x, lo_, _ in reversed(band)]
            out.append(("polygon", ring, colour, 0.2, name, top, ph))
        for name, pts, colour, width in self.lines:
            if log:
                xy = [(px(x), py(y)) for x, y in pts]
            else:  # telemetry: thousands of lines a fleet, no call per point
                bx, by = left - x0 * ax, top + ph + y0 * ay
                xy = [(round(bx + x * ax, 1), round(by - y * ay, 1)) for x, y in pts]
            out.append(("poly", xy, colour, width, name, top, ph))
            if len(pts) == 1:  # one point draws no line: show it
                out.append(("circle", px(pts[0][0]), py(pts[0][1]), 2.5, colour, name))
        for x, title in self.marks:
            out.append(("line", px(x), top, px(x), top + ph, None, BAD, None, title))
        r = 2.5 if len(self.dots) < 300 else 1.8
        out += [("circle", round(px(x)), round(py(y)), r, colour, title)
                for x, y, title, colour in self.dots]
        out += self._refs(py, left, w - right)
        out += self._labels(px, py, w - right)
        if self.note:
            out.append(("text", left + 4, top + ph - 4, self.note, "s", None))
        return out

    def _refs(self, py, x0: float, x1: float) -> list[tuple]:
        out: list[tuple] = []
        used: list[float] = []
        for y, name, colour in sorted(self.refs, key=lambda r: -r[0]):
            ty = py(y) - 3
            while any(abs(ty - u) < 10 for u in used):
                ty += 11  # two reference lines close together: stack their names
            used.append(ty)
            text = f"{name} {fmt(y)}{' ' + self.y.unit if self.y.unit else ''}"
            out += [("line", x0, py(y), x1, py(y), None, colour, "5 3", text),
                    ("text", x1 - 2, ty, text, "s e", colour)]
        return out

    def _labels(self, px, py, right: float) -> list[tuple]:
        out: list[tuple] = []
        used: list[tuple[float, float]] = []
        for x, y, text in self.labels:
            lx, ly, cls = px(x) + 5, py(y) + 3, "s b"
            while any(abs(ly - uy) < 10 and abs(lx - ux) < 120 for ux, uy in used):
                ly -= 10  # the worst few sit close together: fan their names upwards
            used.append((lx, ly))
            if lx > right - 110:
                lx, cls = px(x) - 5, "s b e"
            out.append(("text", lx, ly, text, cls, None))
        return out

    def svg(self) -> str:
        return svg(self.w, self.h, self.title, self.layout())

    def packed(self) -> dict | None:
        """The laid-out chart as compact data for the page's script to draw."""
        items = self.layout()
        if not items:
            return None
        shared = packed_frame(*self._frame_key)
        return {"w": self.w, "h": self.h, "t": self.title, "f": shared,
                "i": pack(items[len(shared):])}


def _title(t) -> str:
    return f"<title>{escape(t)}</title>" if t else ""


def svg(w: int, h: int, title: str, items: list, cls: str = "chart") -> str:
    """Primitives to SVG (the page's script has the same function for packed charts)."""
    if not items:
        return ""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="{cls}" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" role="img" aria-label="{escape(title)}">']
    for it in items:
        kind = it[0]
        if kind == "text":
            fill = f' fill="{it[5]}"' if it[5] else ""
            out.append(f'<text x="{it[1]}" y="{it[2]}" class="{it[4]}"{fill}>'
                       f'{escape(it[3])}</text>')
        elif kind == "line":
            cls = f' class="{it[5]}"' if it[5] else ""
            stroke = f' stroke="{it[6]}"' if it[6] else ""
            dash = f' stroke-dasharray="{it[7]}"' if it[7] else ""
            out.append(f'<line x1="{it[1]}" y1="{it[2]}" x2="{it[3]}" y2="{it[4]}"{cls}{stroke}'
                       f'{dash}>{_title(it[8])}</line>')
        elif kind == "rect":
            out.append(f'<rect x="{it[1]}" y="{it[2]}" width="{it[3]}" height="{it[4]}" '
                       f'fill="{it[5]}" opacity="{it[6]}">{_title(it[7])}</rect>')
        elif kind in ("poly", "polygon"):
            pts = " ".join(f"{x:.0f},{y:.0f}" for x, y in it[1])  # a pixel is fine enough
            paint = (f'fill="none" stroke="{it[2]}" stroke-width="{it[3]}"' if kind == "poly"
                     else f'fill="{it[2]}" opacity="{it[3]}"')
            tag = "polyline" if kind == "poly" else "polygon"
            out.append(f'<{tag} points="{pts}" {paint}>{_title(it[4])}</{tag}>')
        elif kind == "circle":
            out.append(f'<circle cx="{it[1]}" cy="{it[2]}" r="{it[3]}" fill="{it[4]}">'
                       f'{_title(it[5])}</circle>')
        elif kind == "path":
            out.append(f'<path d="{it[1]}" class="{it[2]}"/>')
    out.append("</svg>")
    return "".join(out)


ARITY = {"text": 6, "line": 9, "rect": 8, "circle": 6, "path": 3}


def pack(items: list[tuple]) -> list[list]:
    """Primitives as JSON-ready lists, polylines' points as characters, the x's apart from
    the y's: a node's telemetry lines share their x's, so that compression keeps one copy,
    and a line of 24 points costs about 30 bytes compressed."""
    out = []
    for it in items:
        if it[0] in ("poly", "polygon"):
            top, ph, a = it[5], it[6], ALPHABET
            k = 89 / (ph or 1)
            qx = [int(x * 10 + 0.5) for x, _ in it[1]]
            qy = [int((y - top) * k + 0.5) for _, y in it[1]]
            if qx and (min(qx) < 0 or max(qx) > 8099 or min(qy) < 0 or max(qy) > 89):
                qx = [min(8099, max(0, q)) for q in qx]  # off the chart: pinned to its edge
                qy = [min(89, max(0, q)) for q in qy]
            out.append([it[0], "".join([a[q // 90] + a[q % 90] for q in qx]),
                        "".join([a[q] for q in qy]), *it[2:5], top, ph])
        else:  # trailing nulls dropped: a fleet's sections hold 100,000s of these
            item = list(it)
            while item[-1] is None:
                item.pop()
            out.append(item)
    return out


def unpack(items: list[list]) -> list[tuple]:
    """pack() undone: packed polylines back to points (a section drawn here, not by the
    page's script)."""
    code = {c: i for i, c in enumerate(ALPHABET)}
    out = []
    for it in items:
        if it[0] in ("poly", "polygon"):
            xs, ys, top, ph = it[1], it[2], it[6], it[7]
            pts = [(round((code[xs[2 * i]] * 90 + code[xs[2 * i + 1]]) / 10, 1),
                    round(top + code[ys[i]] / 89 * ph, 1)) for i in range(len(ys))]
            out.append((it[0], pts, *it[3:6]))
        else:
            out.append(tuple(it) + (None,) * (ARITY[it[0]] - len(it)))
    return out


def sparkline(values: list[float | None], title: str, moved: bool = False,
              w: int = 90, h: int = 18) -> str:
    """A figure across runs, oldest first; the last point, this run, red when it moved.
    (The page's script draws the same from the values.)"""
    pts = [(i, v) for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    if not pts:
        return ""
    lo, hi = min(v for _, v in pts), max(v for _, v in pts)
    span = (hi - lo) or abs(hi) or 1.0
    n = max(len(values) - 1, 1)
    xy = [(round(2 + i / n * (w - 6), 1), round(h - 3 - (v - lo) / span * (h - 6), 1))
          for i, v in pts]
    return svg(w, h, title, [("poly", xy, PALETTE[7], 1, title),
                             ("circle", *xy[-1], 2.2, BAD if moved else PALETTE[0], title)],
               "spark")
