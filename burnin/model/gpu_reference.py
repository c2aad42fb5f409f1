"""Reference figures per GPU model: data shipped with the package (data/gpu_models.yaml,
where each figure and its source is documented), which an inventory may extend or
override under `gpu_models:`. Nothing here is code in YAML: each entry is plain values.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from importlib import resources
from typing import Any

import yaml


@dataclass(frozen=True)
class GpuModel:
    key: str
    nvml_names: tuple[str, ...]
    peak_tflops: float | None = None
    burn_tflops: float | None = None
    allreduce_intra_gbps: float | None = None
    allreduce_ranks: int | None = None
    pcie_gbps: float | None = None
    nvlink_links: int | None = None
    pcie_bidir_gbps: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlink_fabric: bool | None = None
    imex_channels: bool | None = None

    def matches(self, nvml_name: str) -> bool:
        """True when a device reporting `nvml_name` is an instance of this model."""
        return nvml_name.strip() in self.nvml_names


# Field name -> (inventory kind, doc); the inventory validates `gpu_models:` with it.
MODEL_FIELDS = {f.name: f.type for f in fields(GpuModel) if f.name != "key"}
FLAG_FIELDS = ("nvlink_fabric", "imex_channels")
NUMERIC_FIELDS = tuple(k for k in MODEL_FIELDS if k != "nvml_names" and k not in FLAG_FIELDS)


def model_from(key: str, values: dict[str, Any]) -> GpuModel:
    return GpuModel(key=key, nvml_names=tuple(values.get("nvml_names", ())),
                    **{k: values[k] for k in (*NUMERIC_FIELDS, *FLAG_FIELDS)
                       if values.get(k) is not None})


def _builtin() -> dict[str, GpuModel]:
    text = resources.files("burnin").joinpath("data").joinpath("gpu_models.yaml").read_text("utf-8")
    # libyaml's loader where PyYAML has it: every burnin process reads this file at import,
    # 30 ms in pure Python (the package's own data: the same values either way).
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return {key: model_from(key, values) for key, values in yaml.load(text, loader).items()}


GPU_MODELS: dict[str, GpuModel] = _builtin()
