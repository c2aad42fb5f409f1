"""The guards issue 29 found unprotected, each broken as the issue broke it, against the
test named to catch it: every line must say 'killed'. Runs in a copy of the checkout (the
working tree is never touched), about a minute in all:

    python tests/table_mutants.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
F = "tests/fast"
# (guard, file, text, broken as, the tests that must fail)
TABLE = [
    ("admit.py: an unknown GPU count counts as GPUs", "burnin/gate/admit.py",
     "int(gpus) if gpus.isdecimal() else None", "int(gpus) if gpus.isdecimal() else 0",
     [f"{F}/test_admission.py::test_an_unknown_gpu_count_counts_as_gpus",
      f"{F}/test_admission.py::test_an_unknown_gpu_count_keeps_out_a_node_that_passed_only"
      "_the_cpu_checks"]),
    ("checks/base.py: only nodes reporting their real device count vote",
     "burnin/checks/base.py",
     'if o.ok and (want is None or len(o.data["devices"]) == want):', "if o.ok:",
     [f"{F}/test_judge_base.py::test_only_nodes_reporting_their_real_device_count_vote",
      f"{F}/test_judge_sdc.py::test_a_node_reporting_more_devices_than_it_has_does_not_vote",
      f"{F}/test_judge_burn.py::test_the_device_count_filter_keeps_a_liar_from_making"
      "_stragglers"]),
    ("checks/sdc.py: random repeats that differ fail the node", "burnin/checks/sdc.py",
     'if rnd["differing_repeats"]:', 'if rnd["differing_repeats"] and False:',
     [f"{F}/test_judge_sdc.py::test_random_repeats_that_differ_fail_the_node"]),
    ("checks/sdc.py: a failed on-device selftest fails the node", "burnin/checks/sdc.py",
     'if dev.get("selftest") is False:', 'if dev.get("selftest") is False and False:',
     [f"{F}/test_judge_sdc.py::test_a_failed_on_device_selftest_fails_the_node"]),
    ("schema.py: only finite numbers", "burnin/probe/shapes.py",
     "if isinstance(value, float) and not math.isfinite(value):", "if False:",
     [f"{F}/test_schema.py::test_num",
      f"{F}/test_properties.py::test_a_document_a_shape_accepts_has_every_declared_field_of"
      "_its_declared_type"]),
    ("ledger.py: a failed write rolls back and re-raises", "burnin/ledger/api.py",
     '                db.execute("ROLLBACK")\n                raise',
     '                db.execute("ROLLBACK")\n                return',
     [f"{F}/test_ledger_cases.py::test_a_write_that_fails_rolls_back_all_of_it_and_re_raises[sqlite]",
      "tests/test_ledger.py::test_a_runs_failures_go_in_together_or_not_at_all"]),
    ("gate.py: error outcomes are quarantined like failed", "burnin/gate/quarantine.py",
     'c.outcome in ("failed", "error")', 'c.outcome in ("failed",)',
     [f"{F}/test_gate.py::test_failed_and_error_outcomes_are_quarantined_alike"]),
    ("probes/storage.py: a block read back from the wrong offset", "probes/storage.py",
     "if stream != self.index or at != offset or length != self.block:",
     "if stream != self.index or length != self.block:",
     [f"{F}/test_storage_probe_blocks.py::test_a_block_read_back_from_the_wrong_offset_is"
      "_caught"]),
]


def main() -> int:
    survived = 0
    with tempfile.TemporaryDirectory(prefix="burnin-table-") as tmp:
        copy = Path(tmp) / "repo"
        copy.mkdir()
        for part in ("burnin", "probes", "tests", "conftest.py", "pyproject.toml"):
            src = REPO / part
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, copy / part)
        env = {**os.environ, "PYTHONPATH": str(copy)}
        every = sorted({t for *_, tests in TABLE for t in tests})
        control = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p",
                                  "no:cacheprovider", *every], cwd=copy, env=env,
                                 capture_output=True, text=True, timeout=600)
        if control.returncode != 0:  # a test that fails anyway proves nothing here
            print(control.stdout[-3000:])
            print("the named tests fail on the unbroken copy")
            return 2
        for guard, file, text, broken, tests in TABLE:
            target = copy / file
            original = target.read_text()
            if original.count(text) != 1:
                print(f"STALE  {guard}: '{text}' is not once in {file}")
                survived += 1
                continue
            target.write_text(original.replace(text, broken))
            try:
                for test in tests:
                    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x",
                                          "-p", "no:cacheprovider", test], cwd=copy, env=env,
                                         capture_output=True, text=True, timeout=600)
                    verdict = "killed" if res.returncode == 1 else (
                        "SURVIVED" if res.returncode == 0 else f"ERROR {res.returncode}")
                    survived += verdict != "killed"
                    print(f"{verdict:8} {guard}: {test}")
            finally:
                target.write_text(original)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
