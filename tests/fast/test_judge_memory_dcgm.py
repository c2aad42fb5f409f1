"""The memory and dcgm judges (burnin/checks/memory.py, dcgm.py)."""

from __future__ import annotations

from support.judging import failed, judge, outcome

from burnin.checks.dcgm import evidence as dcgm_evidence
from burnin.checks.memory import _examples, device_rules
from burnin.checks.memory import evidence as memory_evidence
from burnin.checks.memory import figures as memory_figures

GIB = 1 << 30


def mem(i=0, **over):
    d = {"device": f"cuda:{i}", "name": "H100", "uuid": f"GPU-{i}", "bytes": 2 * GIB,
         "patterns": 12, "bad_words": 0, "bad": [], "verified_gbps": 900.0}
    d.update(over)
    return d


def memory(*devices, errors=()):
    return outcome("memory", list(devices), {"elapsed_s": 1.0}, errors)


def bad_word(k=0, alias=None):
    ex = {"pattern": "walking ones", "offset": 0x1000 + k, "address": f"0x7f00{k:02x}",
          "expected": "0x0000000000000001", "found": "0x0000000000000003", "bits": [1, 5]}
    if alias is not None:
        ex["holds_index_of_offset"] = alias
    return ex


def test_memory_passes_a_clean_device_and_fails_a_failed_probe():
    assert judge("memory", memory(mem(0), mem(1)), devices=2) == ((), ())
    assert judge("memory", failed("memory", "killed")) == (("killed",), ())


def test_memory_bad_words_on_a_device_that_reported_no_size_say_no_memory_was_tested():
    dev = mem(0, bad_words=2, bad=[bad_word(0)])
    del dev["bytes"]
    fail, _ = device_rules(dev, {})
    assert fail[0] == "no memory was tested (nothing could be allocated)"
    assert fail[1].startswith("2 words read back wrong over 12 patterns of 0.000 GiB, "
                              "expected 0; "), fail


def test_memory_with_no_device_tested_fails():
    assert judge("memory", memory()) == (("no device was tested",), ())
    assert judge("memory", memory(errors=["cuda:0: out of memory"])) == (
        ("probe error on cuda:0: out of memory",), ())
    assert judge("memory", memory(), devices=1)[0] == (
        "the probe reported 0 device(s), expected 1 (the inventory's count, or what the "
        "node's health facts showed)",)


def test_memory_words_read_back_wrong_are_located():
    d = mem(0, bad_words=5, bad=[bad_word(0), bad_word(1, alias=0x2000), bad_word(2),
                                 bad_word(3), bad_word(4)])
    assert judge("memory", memory(d, {"device": "cuda:1", "error": "OOM"})) == ((
        "cuda:0 (H100, GPU-0): 5 words read back wrong over 12 patterns of 2.000 GiB, expected "
        "0; e.g. walking ones at offset 0x1000 (address 0x7f0000): expected 0x0000000000000001, "
        "found 0x0000000000000003 (bits 1,5); walking ones at offset 0x1001 (address "
        "0x7f0001): expected 0x0000000000000001, found 0x0000000000000003 (bits 1,5), which "
        "holds the index of the word at offset 0x2000 (an address alias); walking ones at "
        "offset 0x1002 (address 0x7f0002): expected 0x0000000000000001, found "
        "0x0000000000000003 (bits 1,5); 2 more located",), ())
    assert _examples([]) == "none could be located again (transient)"
    assert _examples([bad_word(k) for k in range(4)]).endswith("(bits 1,5); 1 more located")
    assert _examples([bad_word(0)] * 3).endswith("(bits 1,5)")


def test_memory_nothing_allocated_fails():
    assert device_rules({"device": "cuda:0"}, {}) == (
        ["no memory was tested (nothing could be allocated)"], [])
    assert device_rules({"bytes": 0, "bad_words": 1, "patterns": 2}, {}) == (
        ["no memory was tested (nothing could be allocated)",
         "1 words read back wrong over 2 patterns of 0.000 GiB, expected 0; none could be "
         "located again (transient)"], [])


def test_memory_nvml_counters_during_the_check():
    nvml = {"errors": ["ecc: not supported"],
            "before": {"ecc_uncorrected": 0, "ecc_corrected": 0, "retired_pages": 1,
                       "remapped_rows": {"pending": False, "failed": False}},
            "after": {"ecc_uncorrected": 2, "ecc_corrected": 1, "retired_pages": 3,
                      "remapped_rows": {"pending": True, "failed": True}}}
    assert device_rules(mem(0, nvml=nvml), {"max_correctable_ecc": 0}) == ([
        "NVML: ecc: not supported",
        "2 uncorrectable ECC errors during the memory check, expected 0",
        "1 correctable ECC errors during the memory check, above the limit of 0",
        "2 pages retired during the memory check, expected 0",
        "a row remap became pending during the memory check, expected none",
        "a row remap failed during the memory check"], [])
    assert device_rules(mem(0, nvml=nvml), {"max_correctable_ecc": 1})[1] == [
        "1 correctable ECC errors during the memory check (limit 1)"]
    assert device_rules(mem(0, nvml=nvml), {})[0][2] == (
        "1 correctable ECC errors during the memory check, above the limit of 0"), \
        "0 by default"
    already = {"before": {"remapped_rows": {"pending": True, "failed": True}},
               "after": {"remapped_rows": {"pending": True, "failed": True},
                         "ecc_uncorrected": 5}}
    assert device_rules(mem(0, nvml=already), {}) == ([], []), \
        "what was there before the check is health's to judge"
    assert device_rules(mem(0, nvml={"before": None, "after": None}), {}) == ([], [])


def test_memory_judge_names_the_device_for_each_rule():
    nvml = {"before": {"ecc_corrected": 0}, "after": {"ecc_corrected": 2}}
    assert judge("memory", memory(mem(0, nvml=nvml)), settings={"max_correctable_ecc": 5}) == (
        (), ("cuda:0 (H100, GPU-0): 2 correctable ECC errors during the memory check "
             "(limit 5)",))
    lost = {"device": "cuda:0", "error": "OOM"}
    o = memory(lost, mem(1, nvml=nvml, bytes=0), mem(2, nvml=nvml, bytes=0))
    assert judge("memory", o, settings={"max_correctable_ecc": 5}) == ((
        "cuda:1 (H100, GPU-1): no memory was tested (nothing could be allocated)",
        "cuda:2 (H100, GPU-2): no memory was tested (nothing could be allocated)"), (
        "cuda:1 (H100, GPU-1): 2 correctable ECC errors during the memory check (limit 5)",
        "cuda:2 (H100, GPU-2): 2 correctable ECC errors during the memory check (limit 5)"))
    assert judge("memory", memory(mem(0, bytes=0)))[0] == (
        "cuda:0 (H100, GPU-0): no memory was tested (nothing could be allocated)",)


def test_memory_figures_and_evidence():
    nvml = {"before": {"ecc_corrected": 1, "ecc_uncorrected": None},
            "after": {"ecc_corrected": 4, "ecc_uncorrected": 0}}
    both = {"before": {"ecc_corrected": 0, "ecc_uncorrected": 1},
            "after": {"ecc_corrected": 0, "ecc_uncorrected": 2}}
    rec = {"data": {"devices": [{"device": "cuda:1", "error": "OOM", "bytes": 1},
                                mem(0, nvml=nvml, families={"walk": {"patterns": 2}}),
                                {"device": "cuda:2"}, mem(3, nvml=both)]}}
    got = [(f.metric, f.labels, f.value) for f in memory_figures(rec)]
    labels, l3 = (("device", "cuda:0"),), (("device", "cuda:3"),)
    assert got == [("memory_bad_words", labels, 0), ("memory_tested_bytes", labels, 2 * GIB),
                   ("memory_verified_gbps", labels, 900.0),
                   ("memory_ecc_errors", (*labels, ("type", "corrected")), 3),
                   ("memory_bad_words", l3, 0), ("memory_tested_bytes", l3, 2 * GIB),
                   ("memory_verified_gbps", l3, 900.0),
                   ("memory_ecc_errors", (*l3, ("type", "corrected")), 0),
                   ("memory_ecc_errors", (*l3, ("type", "uncorrected")), 1)]
    helps = [f.help for f in memory_figures(rec)][:4]
    assert helps == ["Words of device memory read back wrong in the memory check",
                     "Bytes of device memory the memory check tested",
                     "Device memory written, read back and compared per second",
                     "ECC errors NVML counted during the memory check"]
    ev = memory_evidence(rec)["memory_errors.json"]
    assert ev["cuda:0"] == {"uuid": "GPU-0", "bad_words": 0, "bad": [],
                            "families": {"walk": {"patterns": 2}}, "nvml": nvml, "error": None}
    assert ev["cuda:1"]["error"] == "OOM" and list(ev) == ["cuda:1", "cuda:0", "cuda:2",
                                                           "cuda:3"]


# --- dcgm -----------------------------------------------------------------------------

def result(status="Pass", test="Memory", warnings=None, gpu="0", **extra):
    r = {"category": "Hardware", "test": test, "status": status, "gpu": gpu, **extra}
    if warnings is not None:
        r["warnings"] = warnings
    return r


def dcgm(*results, errors=(), **figs):
    return outcome("dcgm", [], {"applies": True, "level": 2, "exit_status": 0,
                                "results": list(results), **figs}, errors)


MONITOR = {"message": "power capped", "error_id": 12, "severity": 1}
FM_DOWN = {"message": "fabric manager", "error_id": 108, "severity": 1}
ISOLATE = {"message": "row remap failure", "error_id": 95, "severity": 2}


def test_dcgm_passes_quiet_results():
    assert judge("dcgm", dcgm(result(), result("Skip"), result(" not run "))) == ((), ())
    assert judge("dcgm", failed("dcgm", "no dcgmi")) == (("no dcgmi",), ())


def test_dcgm_does_not_apply_where_the_probe_found_no_dcgmi():
    o = outcome("dcgm", [], {"applies": False, "why": "dcgmi not found"}, ["odd"])
    assert judge("dcgm", o) == (("probe error: odd",), ())
    o = outcome("dcgm", [], {"applies": False, "results": [result("Fail")]})
    assert judge("dcgm", o) == ((), ())


def test_dcgm_monitor_only_warnings_warn_and_others_fail():
    o = dcgm(result("Fail", warnings=[MONITOR]), exit_status=226)
    assert judge("dcgm", o) == ((), (
        "DCGM level 2 Hardware/Memory on GPU 0: Fail, only errors DCGM says to watch: power "
        "capped (DCGM error id 12 DCGM_FR_CLOCKS_EVENT_POWER, DCGM_ERROR_MONITOR)",))
    o = dcgm(result("Fail", warnings=[FM_DOWN]), exit_status=226)
    assert judge("dcgm", o) == ((
        "DCGM level 2 Hardware/Memory on GPU 0: Fail: fabric manager (DCGM error id 108 "
        "DCGM_FR_CUDA_FM_NOT_INITIALIZED, DCGM_ERROR_MONITOR)",), ())
    o = dcgm(result("Warn", warnings=[MONITOR, ISOLATE], gpu=None, entity_group=None),
             exit_status=226)
    assert judge("dcgm", o) == ((
        "DCGM level 2 Hardware/Memory: Warn: power capped (DCGM error id 12 "
        "DCGM_FR_CLOCKS_EVENT_POWER, DCGM_ERROR_MONITOR); row remap failure (DCGM error id 95, "
        "DCGM_ERROR_ISOLATE)",), ())
    o = dcgm(result("fail", warnings=[], entity_group="Switch"))
    assert judge("dcgm", o)[0] == (
        "DCGM level 2 Hardware/Memory on Switch 0: fail: no warning, so no error code given",)
    odd = [{"message": "m"}, {"message": "n", "severity": 9, "error_id": None}]
    o = dcgm(result("Fail", warnings=odd))
    assert judge("dcgm", o)[0] == (
        "DCGM level 2 Hardware/Memory on GPU 0: Fail: m (no severity given); n (unknown "
        "severity 9)",)


def test_dcgm_a_result_burnin_does_not_know_fails():
    assert judge("dcgm", dcgm(result("Aborted", warnings=[MONITOR])))[0] == (
        "DCGM level 2 Hardware/Memory on GPU 0: Aborted (a result burnin does not know): "
        "power capped (DCGM error id 12 DCGM_FR_CLOCKS_EVENT_POWER, DCGM_ERROR_MONITOR)",)
    assert judge("dcgm", dcgm(result("Aborted")))[0] == (
        "DCGM level 2 Hardware/Memory on GPU 0: Aborted (a result burnin does not know): no "
        "warning",)


def test_dcgm_exit_status_agrees_or_overrules():
    warn = result("Fail", warnings=[MONITOR])
    assert judge("dcgm", dcgm(warn, exit_status=205))[0] == (
        "dcgmi diag exited 205 (DCGM_ST_NVVS_ISOLATE_ERROR: DCGM says a GPU must be isolated) "
        "though every error it gave is one DCGM says to watch",)
    assert judge("dcgm", dcgm(result(), exit_status=226))[0] == (
        "dcgmi diag exited 226 (DCGM_ST_NVVS_ERROR: the diagnostic reported an error) without "
        "a failed test",)
    assert judge("dcgm", dcgm(result(), exit_status=3))[0] == (
        "dcgmi diag exited 3 without a failed test",)
    assert judge("dcgm", dcgm(result(), exit_status=None)) == ((), ())
    fail = result("Fail", warnings=[ISOLATE])
    assert len(judge("dcgm", dcgm(fail, exit_status=226))[0]) == 1, "a failure says it already"


def test_dcgm_a_diagnostic_that_did_not_finish_fails_first():
    o = dcgm(result("Fail", warnings=[ISOLATE]), stopped="SIGTERM", deadline_s=870.5,
             stop_grace_s=20)
    f, _ = judge("dcgm", o)
    assert f[0] == ("dcgmi diag did not finish within the probe's deadline of 870.5 s (the "
                    "check's timeout_s, less time to stop and report); stopped with SIGTERM, "
                    "on which dcgmi stops the diagnostic")
    assert len(f) == 2
    o = dcgm(stopped="SIGKILL", deadline_s=870.5, stop_grace_s=20, exit_status=None)
    assert judge("dcgm", o)[0] == (
        "dcgmi diag did not finish within the probe's deadline of 870.5 s (the check's "
        "timeout_s, less time to stop and report); it did not stop within 20 s of SIGTERM and "
        "was killed (SIGKILL): nvvs may still be running on the GPUs",)
    o = dcgm(stopped="SIGKILL", exit_status=None)
    assert "deadline of 0 s" in judge("dcgm", o)[0][0] and "within 0 s of" in \
        judge("dcgm", o)[0][0]


def test_dcgm_without_results_judges_the_exit_status_alone():
    o = outcome("dcgm", [], {"applies": True, "level": 1, "exit_status": 0})
    assert judge("dcgm", o) == ((), ())


def test_dcgm_probe_errors_and_evidence():
    o = dcgm(result(), errors=["dcgmi: parse error"])
    assert judge("dcgm", o) == (("probe error: dcgmi: parse error",), ())
    assert dcgm_evidence({"data": {"figures": {"a": 1}}}) == {"dcgm.json": {"a": 1}}
