"""Live progress of long probes: one line per node (elapsed, TFLOPS, hottest device),
redrawn in place on a terminal, printed as plain periodic lines otherwise (CI logs).
A fleet too large for a screen gets a summary line and its slowest nodes."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable

from burnin.model.verdict import clean
from burnin.probe.shapes import MAX_DEVICES


class Progress:
    def __init__(self, write: Callable[[str], None], tty: bool, every_s: float | None = None,
                 max_lines: int = 20):
        self.write, self.tty, self.max_lines = write, tty, max_lines
        self.every_s = every_s if every_s is not None else (1.0 if tty else 30.0)
        self.lock = threading.Lock()
        self.state: dict[str, dict[str, dict]] = {}
        self.check = ""
        self.drawn = 0
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def begin(self, check: str) -> None:
        with self.lock:
            self.check, self.state, self.drawn = check, {}, 0
        self.stop.clear()
        self.thread = threading.Thread(target=self._loop, daemon=True,
                                       name="burnin-progress")
        self.thread.start()

    def update(self, node: str, info: dict, devices: int = MAX_DEVICES) -> None:
        """A progress line's figures (already shape-checked by the probe runner), for one
        of the node's `devices` devices: a node that names more grows nothing here."""
        with self.lock:
            mine = self.state.setdefault(node, {})
            device = clean(str(info.get("device", "?")))
            if device in mine or len(mine) < devices:
                mine[device] = info

    def end(self) -> None:
        self.stop.set()
        if self.thread:
            self.thread.join(timeout=5)
        self._draw()

    def _loop(self) -> None:
        while not self.stop.wait(self.every_s):
            self._draw()

    def lines(self) -> list[str]:
        with self.lock:
            nodes = {n: _node_figures(devs) for n, devs in self.state.items()}
        if not nodes:
            return []
        order = sorted(nodes, key=lambda n: nodes[n]["tflops"])
        if len(nodes) <= self.max_lines:
            return [_line(self.check, n, nodes[n]) for n in sorted(nodes)]
        rates = [f["tflops"] for f in nodes.values()]
        hottest = max(nodes, key=lambda n: nodes[n]["temp"] or -1)
        head = (f"{self.check}: {len(nodes)} nodes reporting, median "
                f"{statistics.median(rates):.2f} TFLOPS, hottest {hottest}"
                + (f" {nodes[hottest]['temp']:.0f} C" if nodes[hottest]["temp"] else ""))
        return [head] + [_line(self.check, n, nodes[n]) for n in order[:5]]

    def _draw(self) -> None:
        lines = self.lines()
        if not lines:
            return
        if self.tty:
            up = f"\x1b[{self.drawn}F" if self.drawn else "\n"
            self.write(up + "".join(f"\x1b[2K{ln}\n" for ln in lines))
            self.drawn = len(lines)
        else:
            self.write("\n" + "\n".join(lines) + "\n")


def _node_figures(devices: dict[str, dict]) -> dict:
    temps = [d["temp_c"] for d in devices.values() if d.get("temp_c") is not None]
    return {"elapsed": max(d.get("elapsed_s", 0) for d in devices.values()),
            "tflops": sum(d.get("tflops", 0) for d in devices.values()),
            "devices": len(devices), "temp": max(temps) if temps else None}


def _line(check: str, node: str, f: dict) -> str:
    hot = f", hottest {f['temp']:.0f} C" if f["temp"] is not None else ""
    return (f"  {check} {node}: {f['elapsed']:.0f} s, {f['tflops']:.2f} TFLOPS over "
            f"{f['devices']} device(s){hot}")
