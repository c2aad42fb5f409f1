"""The built-in checks' parts of a node's section: what an operator opens a node for.
health: the node's facts; burn: telemetry per GPU over time with clock events marked;
sdc: where in C the wrong elements are; storage: GB/s per stream; allreduce: busbw
against message size over the fleet's band; allreduce_internode: the pairs."""

from __future__ import annotations

import math
import statistics
from operator import itemgetter

from burnin.checks.burn import FAULT_REASONS
from burnin.summary.charts import BAD, FLOOR, MEDIAN, PALETTE, Axis, Chart, fmt, fmt_bytes, pack
from burnin.summary.model import floor_of, mapping, num, seq
from burnin.summary.sections import NodeView, charts, facts, note, table, text

# Clock event reasons worth marking (names as probes/telemetry.py records them): the
# judge's faults in red, the power cap (the GPU working as configured) in amber.
MARKED = {0x4: "sw_power_cap", **FAULT_REASONS}
MAX_SPANS = 40       # clock-event spans per chart; the rest are counted in the table


def numbers(values) -> list[float]:
    """The numbers of a series, None (a reading the GPU does not support) left out. The
    probes write plain numbers, so the whole list is checked at C speed and only a
    malformed one is cleaned value by value."""
    vs = seq(values)
    if _plain(vs) is not None:
        return vs
    return [x for x in map(num, vs) if x is not None]


def _plain(values: list) -> float | None:
    """The sum when all are plain finite numbers (what the probes write), checked at C
    speed; None when not."""
    try:
        total = math.fsum(values)
    except TypeError:  # None (a reading the GPU does not support) or junk
        return None
    return total if math.isfinite(total) else None


def thin(xs, ys, n: int) -> list[tuple[float, float]]:
    """At most n points of a series; each interval keeps the value farthest from the
    series' mean (drawn at the interval's middle), so that a one-sample clock dip or
    spike still shows."""
    xs, ys = seq(xs), seq(ys)
    m = min(len(xs), len(ys))
    xs, ys = xs[:m], ys[:m]
    total = _plain(ys)
    if total is None or _plain(xs) is None:  # gaps or junk: the numbers only, then thin
        pairs = [(x, y) for x, y in zip(map(num, xs), map(num, ys), strict=True)
                 if x is not None and y is not None]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        m, total = len(xs), math.fsum(ys)
    if m <= n:
        return list(zip(xs, ys, strict=True))
    mid = total / m  # the mean: a few dips hardly move it, and it costs no sort
    out = []
    for i in range(n):
        lo = i * m // n
        hi = max((i + 1) * m // n, lo + 1)
        seg = ys[lo:hi]
        low, high = min(seg), max(seg)
        out.append(((xs[lo] + xs[hi - 1]) / 2, low if mid - low > high - mid else high))
    return out


def event_runs(t, reasons) -> list[tuple[float, float, str, bool]]:
    """(start s, end s, reason names, fault?) for each run of samples with marked reasons."""
    t, reasons = seq(t), seq(reasons)
    mask = sum(MARKED)
    # Which sample values carry a marked reason, then where they are: list.index runs at
    # C speed, and a burn's few thousand samples have a handful of distinct values.
    try:
        distinct = set(reasons)
    except TypeError:  # a list inside the series: a malformed record
        distinct = {r for r in reasons if type(r) is int}
    marked = {r for r in distinct if type(r) is int and r & mask}
    hits = []
    for value in marked:
        i = reasons.index(value)
        while True:
            hits.append(i)
            try:
                i = reasons.index(value, i + 1)
            except ValueError:
                break
    hits.sort()
    runs: list[tuple[float, float, str, bool]] = []
    gap = 2.5 * _step(t)
    named = {r: (", ".join(name for bit, name in MARKED.items() if r & bit),
                 any(r & bit for bit in FAULT_REASONS)) for r in marked}
    for i in hits:
        x = num(t[i]) if i < len(t) else None
        if x is None:
            continue
        names, fault = named[reasons[i]]
        if runs and runs[-1][2] == names and x - runs[-1][1] <= gap:
            runs[-1] = (runs[-1][0], x, names, fault)
        else:
            runs.append((x, x, names, fault))
    return runs


def _step(t) -> float:
    xs = [num(x) for x in seq(t)[:3]]
    return (xs[1] - xs[0]) if len(xs) > 1 and None not in xs[:2] and xs[1] > xs[0] else 1.0


def burn(view: NodeView, record: dict) -> list:
    data = record["data"]
    devices = [d for d in seq(data.get("devices")) if isinstance(d, dict)]
    time_axis = Axis("time into the burn", "s")
    tflops = Chart("TFLOPS per device over the burn", time_axis, Axis("TFLOPS", "TFLOPS"), 440,
                   210)
    temp = Chart("temperature", time_axis, Axis("°C", "°C", zero=False, span=30), 440, 210)
    clock = Chart("SM clock (clock events shaded)", time_axis,
                  Axis("MHz", "MHz", zero=False, span=300), 440, 210)
    power = Chart("board power", time_axis, Axis("W", "W"), 440, 210)
    rows, spans, names, limits, slowdowns = [], 0, [], [], []
    model = ""
    for i, dev in enumerate(devices):
        colour, name = PALETTE[i % len(PALETTE)], str(dev.get("device", i))
        names.append(name)
        model = model or str(dev.get("name") or "")
        tel = mapping(dev.get("telemetry"))
        s = mapping(tel.get("series"))
        t = s.get("t")
        tflops.line(name, thin(*_columns(dev.get("tflops_series")), view.detail), colour,
                    legend=False)
        for chart, key in ((temp, "temp_c"), (clock, "sm_mhz"), (power, "power_w")):
            chart.line(name, thin(t, s.get(key), view.detail), colour, legend=False)
        runs = event_runs(t, s.get("reasons"))
        for a, b, what, fault in runs:
            if spans < MAX_SPANS:
                clock.span(a, b, f"{name}: {what}, {fmt(a)}-{fmt(b)} s", BAD if fault else FLOOR)
                spans += 1
        for x in seq(tel.get("xid")):
            at = num(mapping(x).get("t"))
            if at is not None:
                for chart in (tflops, clock):
                    chart.mark(at, f"{name}: XID {mapping(x).get('xid')} at {fmt(at)} s")
        limits.append(num(tel.get("power_limit_w")))
        slowdowns.append(num(tel.get("temp_slowdown_c")))
        rows.append(_burn_row(view, dev, s, runs))
    cpu = mapping(mapping(mapping(data.get("figures")).get("cpu_telemetry")).get("series"))
    if cpu:  # a CPU node: the host's temperature and frequency stand in for the GPU's
        temp.line("cpu", thin(cpu.get("t"), cpu.get("temp_c"), view.detail), PALETTE[1])
        clock.line("cpu", thin(cpu.get("t"), cpu.get("mhz"), view.detail), PALETTE[1])
        clock.title = "CPU clock"
        power = Chart("load average (1 min)", time_axis, Axis("load", ""), 440, 210)
        power.line("load1", thin(cpu.get("t"), cpu.get("load1"), view.detail), PALETTE[1])
    tflops.ref(floor_of(view.report, view.node, "burn"), "floor")
    tflops.ref(view.fleet.medians.get(("burn", model)), "fleet median", MEDIAN)
    temp.ref(_one([s for s in slowdowns if s is not None]), "slowdown", BAD)
    power.ref(_one([p for p in limits if p is not None]), "power limit", FLOOR)
    missing = [c.title for c in (tflops, temp, clock, power) if c.empty()]
    notes = [note(f"Not recorded on this node: {', '.join(missing)}.")] if missing else []
    lines = max((len(seq(mapping(mapping(d.get("telemetry")).get("series")).get("t")))
                 for d in devices), default=0)
    if lines > view.detail:
        notes.append(note(f"Each line: {view.detail} points for {lines} samples, each the "
                          "extreme of its interval; every sample is in results.jsonl."))
    head = ["device", "model", "TFLOPS", "of fleet median", "hottest °C", "mean SM MHz",
            "max W", "clock events", "XIDs"]
    return [["legend", [[n, PALETTE[i % len(PALETTE)]] for i, n in enumerate(names)]],
            charts(tflops, temp, clock, power), *notes, table(head, rows)]


def _columns(pairs) -> tuple[list, list]:
    """[[t, v], ...] as ([t, ...], [v, ...]); pairs that are not pairs left out."""
    pairs = seq(pairs)
    try:  # map and itemgetter: no Python-level step per sample
        return list(map(itemgetter(0), pairs)), list(map(itemgetter(1), pairs))
    except (TypeError, IndexError, KeyError):
        good = [p for p in pairs if isinstance(p, list) and len(p) == 2]
        return [p[0] for p in good], [p[1] for p in good]


def _one(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _burn_row(view: NodeView, dev: dict, s: dict, runs) -> list:
    value = num(dev.get("tflops"))
    med = view.fleet.medians.get(("burn", str(dev.get("name") or "")))
    share = f"{value / med:.0%}" if value is not None and med else ""
    temps, clocks, watts = (numbers(s.get(k)) for k in ("temp_c", "sm_mhz", "power_w"))
    events = sorted({r[2] for r in runs})
    faults = any(r[3] for r in runs)
    xids = [str(mapping(x).get("xid")) for x in seq(mapping(dev.get("telemetry")).get("xid"))]
    return [dev.get("device"), dev.get("name"), value, share, max(temps, default=None),
            statistics.fmean(clocks) if clocks else None, max(watts, default=None),
            ["; ".join(events), "fail" if faults else "warn"] if events else "",
            [", ".join(xids), "fail"] if xids else dev.get("error", "")]


def sdc(view: NodeView, record: dict) -> list:
    rows, maps = [], []
    for dev in (d for d in seq(record["data"].get("devices")) if isinstance(d, dict)):
        known, rand = mapping(dev.get("known")), mapping(dev.get("random"))
        wrong = sum(num(mapping(e).get("wrong_elements")) or 0 for e in seq(known.get("events")))
        rows.append([dev.get("device"), dev.get("name"), known.get("dtype"), known.get("n"),
                     known.get("tflops"), known.get("products"), known.get("verified"),
                     known.get("bad_products"), [fmt(wrong), "fail"] if wrong else 0,
                     len(seq(rand.get("differing_repeats"))),
                     str(known.get("digest") or "")[:12], dev.get("error", "")])
        if seq(known.get("events")):
            maps.append(error_map(str(dev.get("device", "?")), num(known.get("n")) or 0,
                                  seq(known.get("events"))))
    head = ["device", "model", "dtype", "n", "TFLOPS", "products", "verified",
            "bad products", "wrong elements", "differing repeats", "digest", "error"]
    out = [table(head, rows)]
    return out + ([["charts", maps]] if maps else
                  [note("No wrong element in any verified product.", "pass")])


def error_map(device: str, n: float, events: list) -> dict:
    """Where in C (n x n) the wrong elements are: the wrong rows in the strip on the
    left, the wrong columns in the strip on top, the named wrong elements as dots."""
    size, m, strip = 200, 46, 8
    n = max(n, 1)
    cell = round(max(size / n, 1.2), 1)

    def at(i) -> float:
        return round(m + (num(i) or 0) / n * size, 1)
    items: list[tuple] = [
        ("text", 0, 13, f"{device}: wrong elements of C ({int(n)} x {int(n)})", "t", None),
        ("rect", m, m, size, size, "#f6f8fa", 1, None),
        ("text", m, m - strip - 5, f"columns 0 to {int(n) - 1}", "s", None),
        ("text", m - strip - 5, m + size, "rows", "s e", None)]
    for k, ev in enumerate(events[:8]):
        ev = mapping(ev)
        colour = (BAD, PALETTE[3], PALETTE[1], PALETTE[4])[k % 4]
        product = ev.get("product")
        items += [("rect", m - strip - 2, at(r), strip, cell, colour, 1,
                   f"row {r} wrong (product {product})") for r in seq(ev.get("rows"))]
        items += [("rect", at(c), m - strip - 2, cell, strip, colour, 1,
                   f"column {c} wrong (product {product})") for c in seq(ev.get("cols"))]
        for x in map(mapping, seq(ev.get("examples"))):
            items.append(("circle", at(x.get("col")), at(x.get("row")), 3, colour,
                          f"C[{x.get('row')}, {x.get('col')}] = {x.get('got')}, expected "
                          f"{x.get('expected')} (product {product})"))
        rows, cols = seq(ev.get("rows")), seq(ev.get("cols"))
        where = (f"row {rows[0]}, col {cols[0]}" if len(rows) == len(cols) == 1 else
                 f"{len(rows)} rows, {len(cols)} cols")
        items.append(("text", m + size + 10, m + 10 + 14 * k,
                      f"product {product}: {ev.get('wrong_elements')} wrong, {where}", "s",
                      colour))
    return {"w": size + m + 250, "h": size + m + 20, "t": f"{device}: wrong elements of C",
            "i": pack(items)}


def storage(view: NodeView, record: dict) -> list:
    data = record["data"]
    fig = mapping(data.get("figures"))
    streams = [d for d in seq(data.get("devices")) if isinstance(d, dict)]
    chart = Chart("GB/s per stream (one per GPU)", Axis("stream", integer=True),
                  Axis("GB/s", "GB/s"), 440, 210)
    rows = []
    for phase, colour in (("read", PALETTE[0]), ("write", PALETTE[1])):
        pts = []
        for i, s in enumerate(streams):
            v = num(mapping(s.get(phase)).get("gbps"))
            if v is not None:
                x = num(s.get("stream"))
                pts.append((i if x is None else x, v))
                chart.dot(pts[-1][0], v, f"stream {s.get('stream')} {phase}: {fmt(v)} GB/s",
                          colour)
        chart.line(phase, pts, colour)
        chart.ref(floor_of(view.report, view.node, f"storage {phase}"), f"{phase} floor", BAD)
        chart.ref(view.fleet.medians.get((f"storage {phase}", "")), f"fleet {phase} median",
                  MEDIAN)
    # The GB/s are on the dots (hover); the table is for what went wrong with a stream.
    for s in streams:
        bad = num(s.get("integrity_errors")) or not (s.get("read") and s.get("write"))
        if bad:
            rows.append([s.get("stream"), s.get("gpu"), mapping(s.get("write")).get("gbps"),
                         mapping(s.get("read")).get("gbps"), s.get("integrity_errors"),
                         ", ".join(str(b) for b in seq(s.get("bad_blocks"))[:4])])
    out = [facts([("path", fig.get("path")), ("direct I/O", fig.get("direct")),
                  ("why not direct", fig.get("direct_reason")), ("verify", fig.get("verify")),
                  ("block bytes", fig.get("block_bytes")), ("iodepth", fig.get("iodepth")),
                  ("integrity errors", fig.get("integrity_errors"))]), charts(chart)]
    if rows:
        out.append(table(["stream", "GPU", "write GB/s", "read GB/s", "integrity errors",
                          "bad blocks"], rows))
    return out


def allreduce(view: NodeView, record: dict) -> list:
    fig = mapping(record["data"].get("figures"))
    world = int(num(fig.get("world")) or 0)
    sweep = [mapping(s) for s in seq(fig.get("sweep"))]
    pts = [(num(s.get("bytes")), num(s.get("busbw_gbps"))) for s in sweep]
    pts = [(b, v) for b, v in pts if b and v is not None]
    chart = Chart(f"busbw against message size ({world} ranks)", Axis("message size", log2=True),
                  Axis("GB/s", "GB/s"), 440, 210)
    part = view.fleet.parts.get("allreduce")
    band = (part.data if part else {}).get(world, [])
    if any(count > 1 for *_, count in band):  # peers to compare with
        chart.band("fleet min-max", [(b, lo, hi) for b, lo, _, hi, _ in band], PALETTE[0])
        chart.line("fleet median", [(b, mid) for b, _, mid, _, _ in band], MEDIAN)
    colour = BAD if view.verdict("allreduce")[0] not in ("passed", "") else PALETTE[5]
    chart.line(view.node, pts, colour, 2, legend=False)
    chart.legend.append(("this node", colour))  # not its name: every node's chart alike
    for b, v in pts:
        chart.dot(b, v, f"{fmt(v)} GB/s at {fmt_bytes(b)}", PALETTE[5])
    chart.ref(floor_of(view.report, view.node, "allreduce"), "floor")
    # Each size's busbw is on its dot (hover); the table is for sizes that summed wrong.
    rows = [[fmt_bytes(num(s.get("bytes")) or 0), s.get("busbw_gbps"), s.get("time_us"),
             [text(s.get("wrong_elements")), "fail"]] for s in sweep if s.get("wrong_elements")]
    out = [facts([("ranks", world), ("backend", fig.get("backend")), ("mode", fig.get("mode"))]),
           charts(chart)]
    if rows:
        out.append(table(["size", "busbw GB/s", "time µs", "wrong elements"], rows))
    return out


def internode(view: NodeView, record: dict) -> list:
    fig = mapping(record["data"].get("figures"))
    group = mapping(fig.get("group"))
    pairs = [mapping(p) for p in seq(fig.get("pairs"))]
    gbps = num(group.get("busbw_gbps"))
    rows = [[" + ".join(str(x) for x in seq(p.get("nodes"))), p.get("busbw_gbps"),
             f"{num(p.get('busbw_gbps')) / gbps:.0%}" if gbps and num(p.get("busbw_gbps"))
             is not None else ""] for p in pairs]
    return [facts([("excluded", fig.get("excluded")), ("group failure", fig.get("group_failure")),
                   ("group nodes", num(group.get("members"))),
                   ("group busbw GB/s", gbps),
                   ("at size", fmt_bytes(num(group.get("bytes"))) if num(group.get("bytes"))
                    else None), ("wrong elements", fig.get("wrong_elements"))])] + \
        ([table(["pair", "busbw GB/s", "of the group's"], rows)] if rows else [])


def health(view: NodeView, record: dict) -> list:
    data = record["data"]
    ident, fig = mapping(data.get("node")), mapping(data.get("figures"))
    gpu, torch = mapping(fig.get("gpu")), mapping(fig.get("torch"))
    mem = num(ident.get("memory_bytes"))
    out = [facts([("hostname", ident.get("hostname")), ("OS", ident.get("os")),
                 ("kernel", ident.get("kernel")), ("CPUs", ident.get("cpu_count")),
                 ("memory", f"{mem / (1 << 30):.0f} GiB" if mem else None),
                 ("driver", gpu.get("driver")), ("CUDA driver", gpu.get("cuda_driver")),
                 ("NVML", gpu.get("nvml")), ("NVML note", gpu.get("reason")),
                 ("torch", torch.get("version")), ("torch CUDA", torch.get("cuda")),
                 ("python", ident.get("python")), ("boot id", ident.get("boot_id"))])]
    rows = []
    for d in (d for d in seq(data.get("devices")) if isinstance(d, dict)):
        pcie, remap = mapping(d.get("pcie")), mapping(d.get("remapped_rows"))
        link = (f"gen {pcie.get('gen')}/{pcie.get('max_gen')} x{pcie.get('width')}/"
                f"{pcie.get('max_width')}" if pcie else "")
        rows.append([d.get("index"), d.get("name"), d.get("uuid"), d.get("pci_bus_id"),
                     d.get("vbios") or d.get("vbios_version"), d.get("ecc_mode_current"),
                     d.get("ecc_uncorrected_volatile"), link,
                     ", ".join(f"{k} {v}" for k, v in remap.items() if v) or
                     ("none" if remap else "")])
    head = ["#", "model", "UUID", "PCI bus", "VBIOS", "ECC", "uncorrected ECC",
            "PCIe (now/max)", "row remaps"]
    if rows and not any(r[4] for r in rows):  # the health probe reads no VBIOS (yet)
        head, rows = head[:4] + head[5:], [r[:4] + r[5:] for r in rows]
    if rows:
        out.append(table(head, rows))
    out += _host(mapping(fig.get("host")))
    return out


def _host(host: dict) -> list:
    """The host beside the GPUs: swap, EDAC, and the XIDs in the kernel log since boot."""
    if not host:
        return []
    log, edac = mapping(host.get("kernel_log")), mapping(host.get("edac"))
    swap = num(host.get("swap_bytes"))
    counts = [f"{mc}: {text(mapping(c).get('ce'))} corrected, {text(mapping(c).get('ue'))} "
              f"uncorrected" for mc, c in mapping(edac.get("controllers")).items()]
    out = [facts([("swap", f"{swap / (1 << 30):.1f} GiB" if swap is not None else None),
                  ("EDAC", "; ".join(counts[:8]) or ("no EDAC driver" if edac else None)),
                  ("kernel log", log.get("source") if log.get("readable") else
                   f"not read: {log.get('error')}" if log else None)])]
    xids = [mapping(x) for x in seq(log.get("xids"))]
    if xids:
        out.append(table(["PCI", "XID", "s after boot", "kernel's words"],
                         [[x.get("pci"), [text(x.get("xid")), "fail"], x.get("t"), x.get("text")]
                          for x in xids]))
    return out


def _grown(counts) -> str:
    """"symbol_error +3, link_downed +1" of the counters that grew."""
    return ", ".join(f"{k} +{text(v)}" for k, v in sorted(mapping(counts).items())
                     if num(v))


def fabric(view: NodeView, record: dict) -> list:
    """The port/link table: every HCA port with its state, rate and what grew over the
    run; every GPU's NVLink links, which are down, and which link counters grew."""
    data = record["data"]
    ib = mapping(mapping(data.get("figures")).get("ib"))
    over = ("since health, over the run's load" if ib.get("since") == "baseline"
            else f"over a quiet {text(ib.get('window_s'))} s")
    bad = "fail"
    rows = []
    for hca in (mapping(h) for h in seq(ib.get("hcas"))):
        for p in (mapping(p) for p in seq(hca.get("ports"))):
            up = p.get("state") == "ACTIVE" and p.get("phys_state") == "LinkUp"
            grew = _grown(p.get("growth"))
            rows.append([hca.get("name"), p.get("port"),
                         [f"{p.get('state')} / {p.get('phys_state')}", "" if up else bad],
                         p.get("rate"), p.get("link_layer"), [grew or "none", bad if grew
                                                              else ""]])
    out = [facts([("HCA root", ib.get("root")), ("counters grew", over)])]
    if rows:
        out.append(table(["HCA", "port", "state / phys", "rate", "link layer",
                          "errors grown"], rows))
    links = []
    for d in (mapping(d) for d in seq(data.get("devices"))):
        nv = mapping(d.get("nvlink"))
        if not nv:
            continue
        down = ", ".join(str(x) for x in seq(nv.get("down")))
        grew = "; ".join(f"link {k}: {_grown(v)}" for k, v in
                         sorted(mapping(nv.get("growth")).items(), key=lambda kv: kv[0]))
        links.append([d.get("index"), d.get("uuid"),
                      [f"{text(nv.get('active'))} of {text(nv.get('links'))}",
                       bad if down else ""], down or "none", [grew or "none",
                                                              bad if grew else ""]])
    if links:
        out.append(table(["GPU", "UUID", "NVLink active", "down", "counters grown"], links))
    elif not rows:
        out.append(note("no HCA port and no NVLink on this node"))
    return out
