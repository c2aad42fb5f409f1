"""The dcgm judge against DCGM's own error table: only the codes DCGM says to watch warn
(burnin/checks/dcgm_codes.py, from NVIDIA/DCGM v4.6.0 dcgm_errors.c), every other error
fails, those of DCGM_ERROR_MONITOR severity too; dcgmi's exit status agrees or overrules."""

from __future__ import annotations

import pytest

from burnin.checks import Judging, resolve_settings
from burnin.checks.dcgm import judge
from burnin.model.nodes import Node
from burnin.probe.protocol import ProbeOutcome

NODE = Node(name="n", address="n", transport="local")


def outcome(figures: dict, errors=()) -> ProbeOutcome:
    return ProbeOutcome("n", "dcgm", True, data={"probe": "dcgm", "schema": 1, "node": {},
                                                 "devices": [], "figures": figures,
                                                 "errors": list(errors)})


def verdict(o: ProbeOutcome):
    return judge(NODE, o, Judging(resolve_settings("dcgm", "standard")))


def result(status: str, *warnings, test: str = "pcie") -> dict:
    return {"category": "Integration", "test": test, "gpu": "0", "status": status,
            "warnings": list(warnings), "info": []}


def warned(severity, text: str = "hot", error_id=42) -> dict:
    return {"message": text, "error_id": error_id, "category": 9, "severity": severity}


def judged(*results, exit_status: int = 226):
    v = verdict(outcome({"applies": True, "level": 2, "exit_status": exit_status,
                         "results": list(results)}))
    return v.failures, v.warnings


HEAD = "DCGM level 2 Integration/pcie on GPU 0: Fail"
HOT = "hot (DCGM error id 42 DCGM_FR_TEMP_VIOLATION, DCGM_ERROR_MONITOR)"
WATCHED = f"{HEAD}, only errors DCGM says to watch: {HOT}"


@pytest.mark.parametrize("results, exit_status, failures, warnings", [
    # Only watched codes of MONITOR severity: a warning, with DCGM's exit for it, or none.
    ([result("Fail", warned(1))], 226, (), (WATCHED,)),
    ([result("Fail", warned(1))], 0, (), (WATCHED,)),
    ([result("Fail", warned(1, "power", 12), warned(1, "sbe", 5))], 226, (),
     (f"{HEAD}, only errors DCGM says to watch: power (DCGM error id 12 "
      "DCGM_FR_CLOCKS_EVENT_POWER, DCGM_ERROR_MONITOR); sbe (DCGM error id 5 "
      "DCGM_FR_VOLATILE_SBE_DETECTED, DCGM_ERROR_MONITOR)",)),
    # MONITOR in DCGM's table is not "can run": the fabric manager down, NVSwitch errors,
    # the fabric probe, a contained error, a CUDA API error all fail, exit 226 or not.
    ([result("Fail", warned(1, "no FM", 108))], 226,
     (f"{HEAD}: no FM (DCGM error id 108 DCGM_FR_CUDA_FM_NOT_INITIALIZED, "
      "DCGM_ERROR_MONITOR)",), ()),
    ([result("Fail", warned(1, "switch", 16))], 226,
     (f"{HEAD}: switch (DCGM error id 16 DCGM_FR_NVSWITCH_NON_FATAL_ERROR, "
      "DCGM_ERROR_MONITOR)",), ()),
    ([result("Fail", warned(1, "switch down", 17))], 226,
     (f"{HEAD}: switch down (DCGM error id 17 DCGM_FR_NVSWITCH_DOWN, DCGM_ERROR_MONITOR)",),
     ()),
    ([result("Fail", warned(1, "fabric", 123))], 0,
     (f"{HEAD}: fabric (DCGM error id 123 DCGM_FR_FABRIC_PROBE_STATE, DCGM_ERROR_MONITOR)",),
     ()),
    ([result("Fail", warned(1, "cuInit", 51))], 226,
     (f"{HEAD}: cuInit (DCGM error id 51 DCGM_FR_CUDA_API, DCGM_ERROR_MONITOR)",), ()),
    # A watched code beside one that is not fails; one with no code, or one DCGM raised
    # to another severity, fails.
    ([result("Fail", warned(1), warned(1, "xid", 131))], 226,
     (f"{HEAD}: {HOT}; xid (DCGM error id 131 DCGM_FR_CONTAINED_ERROR, "
      "DCGM_ERROR_MONITOR)",), ()),
    ([result("Fail", warned(1, "hot", None))], 226,
     (f"{HEAD}: hot (DCGM_ERROR_MONITOR)",), ()),
    ([result("Fail", warned(2, "power", 12))], 226,
     (f"{HEAD}: power (DCGM error id 12 DCGM_FR_CLOCKS_EVENT_POWER, DCGM_ERROR_ISOLATE)",),
     ()),
    # nvvs's own JSON can say Warn; the code and severity still decide.
    ([result("Warn", warned(4))], 226,
     ("DCGM level 2 Integration/pcie on GPU 0: Warn: hot (DCGM error id 42 "
      "DCGM_FR_TEMP_VIOLATION, DCGM_ERROR_TRIAGE)",), ()),
    # Any other severity fails, a known one or not, and so does a Fail with none.
    ([result("Fail", warned(1), warned(6, "remap", 85))], 226,
     (f"{HEAD}: {HOT}; remap (DCGM error id 85, DCGM_ERROR_RESET)",), ()),
    ([result("Fail", warned(5, "persistence mode", 29))], 226,
     (f"{HEAD}: persistence mode (DCGM error id 29, DCGM_ERROR_CONFIG)",), ()),
    ([result("Fail", warned(9))], 226,
     (f"{HEAD}: hot (DCGM error id 42 DCGM_FR_TEMP_VIOLATION, unknown severity 9)",), ()),
    ([result("Fail", warned(None))], 226,
     (f"{HEAD}: hot (DCGM error id 42 DCGM_FR_TEMP_VIOLATION, no severity given)",), ()),
    ([result("Fail")], 226, (f"{HEAD}: no warning, so no error code given",), ()),
    ([result("Broken", warned(1))], 0,
     (f"DCGM level 2 Integration/pcie on GPU 0: Broken (a result burnin does not know): "
      f"{HOT}",), ()),
    # The exit status says what no result did.
    ([result("Fail", warned(1))], 205,
     ("dcgmi diag exited 205 (DCGM_ST_NVVS_ISOLATE_ERROR: DCGM says a GPU must be isolated) "
      "though every error it gave is one DCGM says to watch",), (WATCHED,)),
    ([result("Pass")], 226, ("dcgmi diag exited 226 (DCGM_ST_NVVS_ERROR: the diagnostic "
                             "reported an error) without a failed test",), ()),
    ([result("Skip")], 1, ("dcgmi diag exited 1 without a failed test",), ()),
])
def test_only_the_codes_dcgm_says_to_watch_warn_and_every_other_error_fails(
        results, exit_status, failures, warnings):
    assert judged(*results, exit_status=exit_status) == (failures, warnings)
