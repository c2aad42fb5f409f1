"""Record the fuzzer's seed corpus (tests/test_fuzz_blame.py): one honest document of each
check's probe, from a real run of the suites on this machine with tiny settings, on a
CPU node and on a node of two GPUs emulated below NVML (tests/nvmlemu).

    python tests/corpus/record.py      # rewrites tests/corpus/*.json

The documents are data: the real probes' output on the day they were recorded. A probe
whose document changes shape is recorded again with this command."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))

import nvmlemu  # noqa: E402

TINY = {"sdc": {"duration_s": 0.3, "n": 64, "random_repeats": 2},
        "burn": {"duration_s": 1, "n": 64, "sample_s": 0.25},
        "memory": {"host_bytes": 1 << 20, "retention_s": 0.2, "passes": 1},
        "storage": {"size_gb": 0.02, "streams": 2},
        "allreduce": {"max_bytes": 65536, "seconds_per_size": 0.02},
        "gpupairs": {"block_mb": 1, "seconds": 0.06, "rounds": 6},
        "collectives": {"min_bytes": 65536, "max_bytes": 262144, "seconds_per_size": 0.02},
        "train": {"steps": 6, "warmup_steps": 2, "d_model": 32, "layers": 1, "heads": 2,
                  "seq_len": 16, "vocab": 64, "batch": 4, "gemm_n": 64, "gemm_s": 0.05,
                  "lr": 0.01}}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="burnin-corpus-") as tmp:
        t = Path(tmp)
        scenario = nvmlemu.write_scenario(t / "gpus.json", {"devices": [
            {"uuid": f"GPU-corpus{i}", "pci_bus_id": f"0000:{0x18 + i:02x}:00.0"}
            for i in range(2)]})
        wrapper = nvmlemu.python_wrapper(t / "gpu-python", scenario)
        inv = t / "inv.yaml"
        inv.write_text(json.dumps({
            "version": 1, "cluster": "corpus", "checks": TINY,
            "defaults": {"transport": "local", "storage": {"path": str(t / "storage")}},
            "quarantine": {"ledger": str(t / "ledger.db")},
            "nodes": [{"name": "cpu", "gpus": 0},
                      {"name": "gpu", "gpus": 2, "gpu_model": "H100-SXM5-80GB",
                       "python": wrapper}]}))
        (t / "storage").mkdir()
        subprocess.run([sys.executable, "-m", "pytest", str(REPO / "suites"), "--inventory",
                        str(inv), "--reports", str(t / "reports"), "--profile", "quick",
                        "-k", "not internode", "-p", "no:cacheprovider", "-q"],
                       cwd=t, check=False)
        written = []
        for line in (t / "reports" / "latest" / "results.jsonl").open():
            record = json.loads(line)
            if not record["ok"]:
                print(f"not recorded: {record['node']} {record['check']}: {record['reason']}")
                continue
            path = HERE / f"{record['check']}.{record['node']}.json"
            path.write_text(json.dumps(record["data"], indent=1, sort_keys=True) + "\n")
            written.append(path.name)
        print("recorded:", ", ".join(sorted(written)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
