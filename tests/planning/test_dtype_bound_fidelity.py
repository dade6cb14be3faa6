"""A deployment whose GEMM dtype was never measured on its vendor says so in its fidelity basis.

The shipped calibration measured FP4 GEMMs only on NVIDIA devices (``measured_compute_dtypes_by_vendor``), so an
MI355X FP4 replica is held to its FP8 achieved FLOPS (``CalibrationParams.unmeasured_dtype_bound``); ``gpuplan
estimate`` printed that, the plan result did not. An FP8 replica of the same device (measured on AMD) carries no note.
"""

from __future__ import annotations

import pytest

from catalog import load_catalog
from optimizer.models.params import load_params
from optimizer.optimize import optimize_plan
from workloads.load import parse_plan


def _plan(precision: str):
    return parse_plan({
        "name": "dtype-bound", "objective": "tco", "allowed_devices": ["mi355x"],
        "workloads": [{"name": "chat", "model": "llama-3.1-70b", "qps": 5,
                       "prompt_tokens": 1024, "output_tokens": 256,
                       "slo": {"ttft_p99_ms": 5000, "tpot_p99_ms": 200}, "precisions": [precision]}],
    }, "test")


@pytest.mark.parametrize("precision, noted", [("fp4", True), ("fp8", False)])
def test_plan_fidelity_names_the_unmeasured_dtype_bound(precision, noted):
    result = optimize_plan(_plan(precision), load_catalog(), load_params(), verify=False)
    assert result.status.has_plan
    (d,) = result.deployments
    assert d.device == "mi355x" and d.precision == precision
    assert ("fp4 GEMMs unmeasured on amd devices" in d.fidelity.basis) is noted, d.fidelity.basis
