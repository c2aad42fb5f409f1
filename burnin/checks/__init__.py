"""The checks burnin knows, their settings and profile defaults: one table, data only.

A check is a probe (probes/<name>.py), a judge (burnin/checks/<name>.py) and a suite
(suites/test_<name>.py). Settings here are what `checks.<name>` in an inventory may set;
anything else there is a typo and stops the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROFILES = ("quick", "standard", "extended")
DEFAULT_PROFILE = "standard"


@dataclass(frozen=True)
class Setting:
    """One setting: its kind ('number', 'int', 'bool', 'str') and default per profile."""

    kind: str
    default: dict[str, object] | object = None
    doc: str = ""

    def value_for(self, profile: str) -> object:
        if isinstance(self.default, dict):
            return self.default[profile]
        return self.default


@dataclass(frozen=True)
class CheckSpec:
    name: str
    settings: dict[str, Setting] = field(default_factory=dict)


def _timeout(quick: float, standard: float, extended: float) -> Setting:
    return Setting("number", {"quick": quick, "standard": standard, "extended": extended},
                   "seconds before the probe's process group is killed")


CHECKS: dict[str, CheckSpec] = {
    spec.name: spec
    for spec in (
        CheckSpec("health", {"timeout_s": _timeout(60, 120, 300)}),
        CheckSpec("sdc", {
            "timeout_s": Setting("positive", None, "default: 2 x duration_s + 300"),
            "duration_s": Setting("positive", {"quick": 20, "standard": 60, "extended": 300},
                                  "known-answer phase, per device"),
            "n": Setting("int", None, "matrix size; default 8192 on GPU, 1024 on CPU"),
            "dtype": Setting("dtype", None, "bf16|fp16|fp32; default bf16 on GPU, fp32 on CPU"),
            "max_products": Setting("int", None, "stop after this many products"),
            "random_repeats": Setting("int", 8),
            "verify_every": Setting("verify_every", "auto",
                                    "verify every k-th product; auto keeps it near 3%"),
            "memory_fraction": Setting("positive", 0.5, "GPU memory for output buffers"),
            "buffers": Setting("int", 4, "output buffers on a CPU"),
            "inject": Setting("faults", [], "FOR TESTS ONLY: faults planted in results"),
        }),
        CheckSpec("burn", {
            "timeout_s": Setting("positive", None, "default: 2 x duration_s + 300"),
            "duration_s": Setting("positive",
                                  {"quick": 60, "standard": 600, "extended": 3600}),
            "n": Setting("int", None, "matrix size; default 8192 on GPU, 1024 on CPU"),
            "dtype": Setting("dtype", None, "bf16|fp16|fp32; default bf16 on GPU, fp32 on CPU"),
            "sample_s": Setting("positive", 1.0, "telemetry and throughput interval"),
            "verify_every": Setting("verify_every", "auto"),
            "memory_fraction": Setting("positive", 0.5),
            "buffers": Setting("int", 4),
            "min_tflops": Setting("positive", None, "default: the gpu_model's floor"),
            "peer_fraction": Setting("fraction", 0.9,
                                     "fail below this share of the same model's median; "
                                     "0 turns the rule off"),
            "clock_fraction": Setting("fraction", 0.9,
                                      "fail a mean SM clock below this share of peers'"),
            "max_correctable_ecc": Setting("int", 100, "warn above 0, fail above this"),
            "max_pcie_replays": Setting("int", 100, "warn above 0, fail above this"),
            "max_nvlink_errors": Setting("int", 100, "CRC + recovery; warn above 0"),
        }),
        CheckSpec("storage", {
            "timeout_s": _timeout(300, 900, 1800),
            "size_gb": Setting("positive", {"quick": 1, "standard": 4, "extended": 16},
                               "per stream; large enough to defeat caches"),
            "duration_s": Setting("positive", None, "time-based writes instead of size_gb"),
            "block_mb": Setting("int", 4),
            "iodepth": Setting("int", 4, "requests in flight per stream"),
            "streams": Setting("int", 4, "streams on a CPU-only node (one per GPU otherwise)"),
            "verify": Setting("verify", "inline", "inline (timed) or after (untimed)"),
            "min_read_gbps_per_gpu": Setting("number", None, "floor for the slowest stream"),
            "min_write_gbps_per_gpu": Setting("number", None),
            "stream_fraction": Setting("fraction", 0.5,
                                       "fail a stream below this share of the node's median"),
            "handshake_dir": Setting("str", None, "FOR TESTS ONLY: pause between phases"),
        }),
        CheckSpec("allreduce", {
            "timeout_s": _timeout(300, 600, 1200),
            "min_busbw_gbps": Setting("positive", None, "intra-node floor; default: the "
                                      "gpu_model's for a full 8-GPU node"),
            "min_internode_busbw_gbps": Setting("positive", None, "inter-node floor"),
            "peer_fraction": Setting("fraction", 0.5, "intra-node, with no floor: fail "
                                     "below this share of the run's median"),
            "pair_fraction": Setting("fraction", 0.5, "inter-node, with no floor: a pair "
                                     "below this share of the median pair is slow; 0: "
                                     "no localisation"),
            "min_bytes": Setting("int", None, "default 1 MiB on GPUs, 64 KiB on CPUs"),
            "max_bytes": Setting("int", None, "default 1 GiB on GPUs, 16 MiB on CPUs"),
            "warmup": Setting("int", 5),
            "seconds_per_size": Setting("positive", {"quick": 0.2, "standard": 0.5,
                                                     "extended": 2.0}),
            "ranks": Setting("int", 2, "ranks on a CPU-only node, intra-node"),
            "rendezvous_timeout_s": Setting("positive", 60),
        }),
        # The inter-node part of allreduce: its settings are checks.allreduce's.
        CheckSpec("allreduce_internode", {"timeout_s": _timeout(300, 600, 1200)}),
    )
}

# Single-node checks come first: the inter-node all-reduce only takes nodes that passed them.
CHECK_ORDER = ("health", "sdc", "burn", "storage", "allreduce", "allreduce_internode")


def resolve_settings(check: str, profile: str, overrides: dict) -> dict:
    """The settings a check runs with: profile defaults, then the inventory's overrides."""
    spec = CHECKS[check]
    values = {key: s.value_for(profile) for key, s in spec.settings.items()}
    values.update(overrides)
    if values.get("timeout_s") is None:
        values["timeout_s"] = 2 * values.get("duration_s", 0) + 300
    return values
