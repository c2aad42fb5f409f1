"""A node whose torch predates torch.mm(..., out_dtype=) (torch < 2.8): the GEMM probes say
so once, as a probe error the judge fails the node with, never a traceback per device.

Older torch cannot be installed here, so the probe's interpreter is given torch's older
API at start (a sitecustomize chained after the NVML emulator's): aten::mm with only its
`default` and `out` overloads, as torch 2.7 registers it, and torch.mm refusing
out_dtype as it does there."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from burnin.model.nodes import Node
from burnin.probe.protocol import run_probe
from burnin.transports.local import LocalTransport

REPO = Path(__file__).resolve().parent.parent
OLD_TORCH = textwrap.dedent("""\
    import torch

    class _OldMm:
        # aten::mm as torch 2.7 registers it: no mm.dtype / mm.dtype_out overloads.
        def __init__(self, packet):
            self._packet = packet

        def overloads(self):
            return [o for o in self._packet.overloads() if not o.startswith("dtype")]

        def __getattr__(self, name):
            if name.startswith("dtype"):
                raise AttributeError(name)
            return getattr(self._packet, name)

        def __call__(self, *args, **kwargs):
            return self._packet(*args, **kwargs)

    torch.ops.aten.mm = _OldMm(torch.ops.aten.mm)
    torch.__version__ = "2.7.1+cu126"
    _mm = torch.mm

    def _old_mm(*args, **kwargs):
        if "out_dtype" in kwargs:
            raise TypeError("mm() received an invalid combination of arguments - got "
                            "(Tensor, Tensor, out_dtype=torch.dtype)")
        return _mm(*args, **kwargs)

    torch.mm = _old_mm
    """)


@pytest.fixture
def old_torch(tmp_path, monkeypatch):
    site = tmp_path / "old-torch"
    site.mkdir()
    (site / "sitecustomize.py").write_text(OLD_TORCH)
    # After the emulator's site on PYTHONPATH: its sitecustomize runs this one.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, (os.environ.get("PYTHONPATH"), str(site)))))


def run(probe: str, settings: dict) -> dict:
    out = run_probe(LocalTransport(Node(name="n", address="n", transport="local"),
                                   REPO / "probes"), probe, {"gpus": 2, "settings": settings},
                    300)
    assert out.ok, out.reason
    return out.data


LACKS = ("torch 2.7.1+cu126 lacks torch.mm(..., out_dtype=torch.float32) (the fp32-output "
         "bf16/fp16 GEMM, aten::mm.dtype_out): the GPU checks need torch >= 2.8")


@pytest.mark.parametrize("probe, settings", [
    ("sdc", {"duration_s": 0.3, "n": 64, "random_repeats": 2}),
    ("burn", {"duration_s": 1, "n": 64, "sample_s": 0.25}),
])
def test_a_gpu_node_with_torch_older_than_out_dtype_says_so_once(nvml, old_torch, probe,
                                                                settings):
    nvml(devices=[{"uuid": "GPU-a"}, {"uuid": "GPU-b"}])
    data = run(probe, settings)
    assert data["errors"] == [LACKS]
    assert data["devices"] == [], "nothing measured, no error per device"


def test_a_gpu_node_with_a_torch_that_has_out_dtype_runs(nvml):
    nvml(devices=[{"uuid": "GPU-a"}, {"uuid": "GPU-b"}])
    data = run("sdc", {"duration_s": 0.3, "n": 64, "random_repeats": 2})
    assert data["errors"] == [] and len(data["devices"]) == 2
