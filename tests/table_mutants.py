"""The guards issues 29 and 50 found unprotected (and those added with them), each broken
as the issue broke it, against the test named to catch it: every line must say 'killed'.
Runs in a copy of the checkout (the working tree is never touched), about four minutes in
all (a broken time bound is caught at the bound it broke):

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
    ("ledger.py: a failed write rolls back and re-raises", "burnin/ledger/backends.py",
     '                db.execute("ROLLBACK")\n                raise',
     '                db.execute("ROLLBACK")\n                return',
     [f"{F}/test_ledger_cases.py::test_a_write_that_fails_rolls_back_all_of_it_and_re_raises[sqlite]"]),
    ("gate.py: error outcomes are quarantined like failed", "burnin/model/outcome.py",
     "return self in (Outcome.FAILED, Outcome.ERROR)", "return self in (Outcome.FAILED,)",
     [f"{F}/test_gate.py::test_failed_and_error_outcomes_are_quarantined_alike"]),
    ("probes/storage.py: a block read back from the wrong offset", "probes/storage.py",
     "if stream != self.index or at != offset or length != self.block:",
     "if stream != self.index or length != self.block:",
     [f"{F}/test_storage_probe_blocks.py::test_a_block_read_back_from_the_wrong_offset_is"
      "_caught"]),
    ("probes/nvlink5.py: NVLink 5's failed link recoveries (field 214) are read",
     "probes/nvlink5.py", '    "link_recovery_failed_events": 214,', "",
     ["tests/test_surviving_mutants.py::test_a_failed_nvlink5_link_recovery_counts_in_the"
      "_burns_recoveries",
      "tests/test_nvlink_dcgm.py::test_one_nvlink5_error_of_any_dcgm_field_fails_the_link"]),
    ("probes/train.py: a rank that exits non-zero is failed, whatever it printed",
     "probes/train.py", "if code != 0 or not lines:", "if not lines:",
     ["tests/test_surviving_mutants.py::test_a_rank_that_prints_its_result_and_exits_non"
      "_zero_fails_the_node"]),
    ("probes/train.py: tokens/s over the slowest rank's wall", "probes/train.py",
     'wall = max(r["wall_s"] for r in records)', 'wall = min(r["wall_s"] for r in records)',
     ["tests/test_surviving_mutants.py::test_tokens_per_s_is_over_the_slowest_ranks_wall"
      "_time"]),
    ("transports/fanout.py: the start gate waits its bound, not 20 times it",
     "burnin/transports/fanout.py", "and not self._late(wait_s)):",
     "and not self._late(wait_s * 20)):",
     [f"{F}/test_start_gate.py::test_an_item_that_never_arrives_holds_the_others_only_its"
      "_bound"]),
    ("transports/ssh.py: the holder's lines are read to LINE_MAX", "burnin/transports/ssh.py",
     "first = answers.readline(LINE_MAX)", "first = answers.readline()",
     ["tests/test_ssh_endless_line.py::test_a_holder_line_without_end_fails_the_node_briefly"
      "_and_in_bounded_memory[ready]"]),
    ("transports/reading.py: a node's words in a message are capped",
     "burnin/transports/reading.py", "    if len(text) <= limit:", "    if True:",
     ["tests/test_ssh_endless_line.py::test_a_holder_line_without_end_fails_the_node_briefly"
      "_and_in_bounded_memory[ready]"]),
    ("transports/srun_step.py: srun's line with no end yet is kept to LINE_MAX",
     "burnin/transports/srun_step.py", "if len(buf) > LINE_MAX:", "if False:",
     ["tests/test_srun_endless_line.py::test_a_task_writing_without_end_is_read_in_bounded"
      "_memory[err-endless]"]),
    ("transports/salloc.py: salloc's holder's first line is read to LINE_MAX",
     "burnin/transports/salloc.py", 'and len(line) <= LINE_MAX \\', "\\",
     ["tests/test_srun_endless_line.py::test_a_holder_first_line_without_end_or_json_is_no"
      "_allocation[endless]"]),
    ("ledger/url.py: a parameter's name is judged percent-decoded", "burnin/ledger/url.py",
     "SECRET_NAME.search(unquote(name))", "SECRET_NAME.search(name)",
     ["tests/test_secrets_masked.py::test_a_secret_parameter_is_masked_whatever_the_spelling"
      "_of_its_name"]),
    ("engine/kept_inventory.py: the run's inventory copy is masked",
     "burnin/engine/kept_inventory.py", "write_text(masked(inventory_file.read_text(",
     "write_text((inventory_file.read_text(",
     ["tests/test_secrets_masked.py::test_the_kept_inventory_copy_masks_the_ledger_secret_and"
      "_keeps_the_settings"]),
    ("tests/support/ci_strict.py: in CI a module skipped as a whole fails",
     "tests/support/ci_strict.py", "if os.environ.get(\"CI\") and report.skipped:",
     "if False:",
     ["tests/test_ci_strict.py::test_every_kind_of_skip_fails_under_ci"]),
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
