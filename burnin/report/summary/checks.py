"""The built-in checks' parts of a node's section, but burn's (burnin/report/summary/burn_part.py):
what an operator opens a node for. health: the node's facts; sdc: where in C the
wrong elements are; storage: GB/s per stream; allreduce: busbw against message size
over the fleet's band; allreduce_internode: the pairs; fabric: ports and links."""

from __future__ import annotations

from burnin.report.summary.charts import BAD, MEDIAN, PALETTE, Axis, Chart, fmt, fmt_bytes, pack
from burnin.report.summary.model import floor_of, mapping, num, seq
from burnin.report.summary.sections import NodeView, charts, facts, note, table, text


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
    read = [(num(s.get("bytes")), num(s.get("busbw_gbps"))) for s in sweep]
    pts = [(b, v) for b, v in read if b and v is not None]
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
             f"{share / gbps:.0%}" if gbps and (share := num(p.get("busbw_gbps")))
             is not None else ""] for p in pairs]
    return [facts([("excluded", fig.get("excluded")), ("group failure", fig.get("group_failure")),
                   ("group nodes", num(group.get("members"))),
                   ("group busbw GB/s", gbps),
                   ("at size", fmt_bytes(size) if (size := num(group.get("bytes")))
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
