"""Reference figures per GPU model: data, not code.

`gpu_model` in an inventory must be a key of GPU_MODELS; the NVML names are what
nvmlDeviceGetName reports for that model, used by the health check to tell whether a
node holds what the inventory says. Later checks add their floors here, per model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    key: str
    nvml_names: tuple[str, ...]
    # Sustained dense bf16 GEMM floor for the burn check, in TFLOPS: well under what a
    # healthy device of the model reaches with torch.mm at n=8192 (about 60-75% of the
    # datasheet's dense peak), so that only a clearly sick device falls below it. The
    # peer-median rule catches the subtler stragglers. Overridable: checks.burn.min_tflops.
    burn_tflops: float | None = None
    # Intra-node all-reduce busbw floor for a full 8-GPU node, GB/s, from published
    # operator thresholds (about 460 GB/s for 8 x H100 SXM with NVLS). Overridable:
    # checks.allreduce.min_busbw_gbps.
    allreduce_intra_gbps: float | None = None


GPU_MODELS: dict[str, GpuModel] = {
    m.key: m
    for m in (
        GpuModel("A100-SXM4-40GB", ("NVIDIA A100-SXM4-40GB",), 200, 220),
        GpuModel("A100-SXM4-80GB", ("NVIDIA A100-SXM4-80GB",), 200, 220),
        GpuModel("A100-PCIe-80GB", ("NVIDIA A100 80GB PCIe",), 180),
        GpuModel("H100-SXM5-80GB", ("NVIDIA H100 80GB HBM3",), 550, 460),
        GpuModel("H100-PCIe-80GB", ("NVIDIA H100 PCIe",), 380),
        GpuModel("H100-NVL-94GB", ("NVIDIA H100 NVL",), 450),
        GpuModel("H200-SXM-141GB", ("NVIDIA H200",), 550, 460),
        GpuModel("H200-NVL-141GB", ("NVIDIA H200 NVL",), 450),
        GpuModel("GH200-96GB", ("NVIDIA GH200 480GB", "NVIDIA GH200 96GB HBM3"), 550),
        GpuModel("B200-SXM-180GB", ("NVIDIA B200",), 1100, 700),
        GpuModel("L40S-48GB", ("NVIDIA L40S",), 180),
    )
}


def model_matches(model_key: str, nvml_name: str) -> bool:
    """True when a device reporting `nvml_name` is an instance of inventory model `model_key`."""
    model = GPU_MODELS.get(model_key)
    return model is not None and nvml_name.strip() in model.nvml_names
