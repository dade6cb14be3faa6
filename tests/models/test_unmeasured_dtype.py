"""An unmeasured GEMM dtype gets no datasheet speed-up (issue 14, leave-one-generation-out Blackwell):
``CalibrationParams.measured_compute_dtypes`` and ``unmeasured_dtype_speedup_cap``.

Expected values are derived on paper on the synthetic device of ``test_perf_v2`` (dense peaks BF16 1000,
FP8 2000, FP4 4000 TFLOPS): with GEMM efficiencies e_16 = 0.6 and e_fp8 = 0.7, FP8 GEMMs reach
0.7·2000 = 1400 TFLOPS; an unmeasured FP4 would reach 0.6·4000 = 2400 on the datasheet, and is held to
min(2400, cap·1400).
"""

from __future__ import annotations

import numpy as np
import pytest

from catalog.schema import Model
from optimizer.calibration.calibrate import structure_of
from optimizer.calibration.fit import fit_params, measured_compute_dtypes
from optimizer.calibration.measurements import load_measurements
from optimizer.models.configs import build_configs
from optimizer.models.estimate import estimate_config
from optimizer.models.params import CalibrationParams, FactorOverride, load_params
from optimizer.models.perf import _gemm_s, decode_step_s, offline_throughput_tokens_s
from tests.conftest import EXAMPLES
from tests.models.test_perf_v2 import BF16, CAT, FP4, FP8, ZERO_HOST, dense, device, moe

INT8, INT4, MXFP4 = (CAT.precision(k) for k in ("int8", "int4", "mxfp4"))
FP8_OVERRIDE = FactorOverride(compute_dtype="fp8", compute_efficiency=0.7)
TOKENS = 65536.0  # compute-bound: 2·8e9·65536 FLOPs = 1.05e15 against 16e9 B of weights at 4 TB/s (4 ms)
BODY = 8e9 - 2 * 256 * 4096  # dense(): 8e9 parameters less the embedding and lm_head (vocab 256 · hidden 4096 each)


def params(measured: list[str] | None, *overrides: FactorOverride, **kw) -> CalibrationParams:
    return CalibrationParams(compute_efficiency=0.6, measured_compute_dtypes=measured,
                             overrides=[FP8_OVERRIDE, *overrides], **ZERO_HOST, **kw)


def gemm_s(p: CalibrationParams, *precisions, model: Model | None = None, d=None) -> np.ndarray:
    """Time of the GEMMs (no lm_head) of one pass of TOKENS tokens, per precision (hard max: n = 64)."""
    c = build_configs(model or dense(), [(d or device(), q, 1, 1) for q in precisions], p)
    return _gemm_s(c, np.full(len(c), TOKENS), 1, sides=False)[0]


def test_unmeasured_fp4_gemms_run_at_the_fp8_speed():
    """FP4 not measured, FP8 measured: FP4 GEMMs take 2·BODY·T / (0.7·2000e12) s, exactly the FP8 time, where
    the datasheet (measured list None: every dtype trusted) gives 2·BODY·T / (0.6·4000e12), 1400/2400 of it."""
    fp8_s = 2 * BODY * TOKENS / 1400e12
    held = gemm_s(params(["bf16", "fp8"]), FP8, FP4)
    assert held[0] == pytest.approx(fp8_s, rel=1e-12)
    assert held[1] == pytest.approx(fp8_s, rel=1e-12)
    trusted = gemm_s(params(None), FP8, FP4)
    assert trusted[1] == pytest.approx(2 * BODY * TOKENS / 2400e12, rel=1e-12)
    assert trusted[1] / held[1] == pytest.approx(1400 / 2400, rel=1e-12)


def test_the_cap_scales_the_wider_dtypes_flops():
    """cap 1.15 (the issue's 'NVFP4 ~1.15x FP8'): 1.15·1400 = 1610 TFLOPS, still below 2400; cap 2 would allow
    2800 > 2400, so the datasheet's own 2400 stands."""
    got = gemm_s(params(["bf16", "fp8"], unmeasured_dtype_speedup_cap=1.15), FP4)[0]
    assert got == pytest.approx(2 * BODY * TOKENS / 1610e12, rel=1e-12)
    loose = gemm_s(params(["bf16", "fp8"], unmeasured_dtype_speedup_cap=2.0), FP4)[0]
    assert loose == pytest.approx(2 * BODY * TOKENS / 2400e12, rel=1e-12)


def test_the_chain_skips_unmeasured_dtypes_down_to_16_bit():
    """Only 16 bit measured: FP8, FP4 and INT8 (int8 peak 2000) all held to e_16·P_16 = 0.6·1000 = 600 TFLOPS
    (FP8 keeps its own override's 0.7 as its efficiency: 0.7·P = 600e12 gives the same time)."""
    d = device(int8_tops=2000.0)
    got = gemm_s(params(["bf16"]), BF16, FP8, FP4, INT8, d=d)
    assert got == pytest.approx([2 * BODY * TOKENS / 600e12] * 4, rel=1e-12)


def test_a_bound_above_the_dtypes_own_flops_changes_nothing():
    """FP4 unmeasured but its own 0.3·4000 = 1200 TFLOPS is already below FP8's 1400: not bound, bit for bit."""
    slow = FactorOverride(compute_dtype="fp4", compute_efficiency=0.3)
    a = build_configs(dense(), [(device(), FP4, 1, 1)], params(["bf16", "fp8"], slow))
    b = build_configs(dense(), [(device(), FP4, 1, 1)], params(None, slow))
    assert a.peak_flops[0] == b.peak_flops[0] == 4000e12
    bound = params(["bf16", "fp8"], slow).unmeasured_dtype_bound(device(), None, "fp4")
    assert bound is not None and not bound.binds
    assert (bound.own_flops_s, bound.bound_flops_s) == pytest.approx((1200e12, 1400e12), rel=1e-12)


def test_with_the_fp4_override_measured_nothing_changes():
    """The shipped parameters measure FP4 (an fp4 override fitted on B200/B300): recording the dtypes they were
    fitted on (bf16, fp16, fp8, fp4) moves no configuration of FP4, MXFP4, NVFP4, FP8 or BF16 on any catalog
    device by a bit (step times and offline throughput), MoE and dense."""
    shipped = load_params().model_copy(update={"measured_compute_dtypes": None, "measured_compute_dtypes_by_vendor": None})
    assert any(o.compute_dtype == "fp4" for o in shipped.overrides)
    recorded = shipped.model_copy(update={"measured_compute_dtypes": ["bf16", "fp16", "fp8", "fp4"]})
    precs = [CAT.precision(k) for k in ("fp4", "nvfp4", "mxfp4", "fp8", "bf16", "int4")]
    for key in ("llama-3.1-70b", "gpt-oss-120b", "qwen3-235b-a22b"):
        m = CAT.model(key)
        combos = [(d, q, 8, 1) for d in CAT.devices.values() for q in precs if q.compute_peak_tflops(d)]
        a, b = build_configs(m, combos, shipped), build_configs(m, combos, recorded)
        assert np.array_equal(a.peak_flops, b.peak_flops, equal_nan=True)
        assert np.array_equal(decode_step_s(a, 64.0, 2048.0), decode_step_s(b, 64.0, 2048.0), equal_nan=True)
        assert np.array_equal(offline_throughput_tokens_s(a, 1024, 1024)[1], offline_throughput_tokens_s(b, 1024, 1024)[1],
                              equal_nan=True)


def test_weight_only_and_mxfp4_experts():
    """W4A16 (int4) computes in 16 bit: never held. An MXFP4 MoE that keeps its dense part 16 bit
    (gpt-oss, Model.unquantized_dense): the dense GEMMs stay at e_16·P_16 = 600 TFLOPS, the routed experts'
    grouped GEMMs at min(e·P_fp4, e_fp8·P_fp8)·e_moe = 1400·0.5 = 700 TFLOPS (datasheet: 2400·0.5 = 1200)."""
    p = params(["bf16", "fp8"], moe_efficiency=0.5)
    c = build_configs(dense(), [(device(), INT4, 1, 1)], p)
    assert c.peak_flops[0] == 1000e12
    m = moe(unquantized_dense=True)
    c = build_configs(m, [(device(), MXFP4, 1, 1)], p)
    assert c.stage.gemm_flops_s[0] == pytest.approx(600e12, rel=1e-12)
    assert c.stage.moe_flops_s[0] == pytest.approx(700e12, rel=1e-12)
    c = build_configs(m, [(device(), MXFP4, 1, 1)], params(None, moe_efficiency=0.5))
    assert c.stage.moe_flops_s[0] == pytest.approx(1200e12, rel=1e-12)


def test_the_fit_records_the_dtypes_of_its_rows():
    """The example measurements: offline Llama-3.1-70B FP8 rows on H100 and gpt-oss-120b FP4 rows on B200 (its
    BF16 rows are online-serving rows, not fitted at online weight 0): measured = fp4, fp8, so a BF16 or INT8
    configuration is not held (16 bit is the widest; INT8 is held to 16 bit)."""
    rows = load_measurements(EXAMPLES / "measurements-example.csv", CAT)
    fitted = fit_params(rows, CAT, sweeps=0, optimizer="coordinate")
    assert fitted.measured_compute_dtypes == ["fp4", "fp8"]
    assert measured_compute_dtypes(rows[:2], CAT) == ["fp8"]


def test_estimate_says_when_a_prediction_rests_on_the_bound():
    """B200 FP4 under the shipped parameters without their FP4 override and FP4 left out of the measured list:
    the fidelity basis names the bound; with the shipped parameters it does not, and FP4 is ~2x slower than the
    datasheet would make it only where the bound binds (the shipped fp4 share 0.36 is below fp8's 0.76/2)."""
    shipped = load_params()
    no_fp4 = shipped.model_copy(update={"measured_compute_dtypes": ["bf16", "fp16", "fp8"],
                                        "measured_compute_dtypes_by_vendor": None,
                                        "overrides": [o for o in shipped.overrides if o.compute_dtype != "fp4"]})
    kw = dict(devices=CAT.devices, max_throughput=True)
    m, d = CAT.model("llama-3.1-70b"), CAT.device("b200")
    held = estimate_config(m, d, FP4, 1, 1, 1024, 1024, no_fp4, **kw)
    assert "fp4 GEMMs unmeasured" in held["fidelity"]["basis"]
    assert "fp8 GEMMs on this device" in held["fidelity"]["basis"]
    plain = estimate_config(m, d, FP4, 1, 1, 1024, 1024, shipped, **kw)
    assert "unmeasured" not in plain["fidelity"]["basis"]


def test_leave_out_refits_keep_the_cap_not_the_list():
    """``gpuplan calibrate`` restarts its leave-out refits from the defaults plus the start's structure: the cap
    travels, the measured list does not (each refit writes the dtypes of its own rows: LOGO Blackwell has no fp4)."""
    start = CalibrationParams(unmeasured_dtype_speedup_cap=1.15, measured_compute_dtypes=["bf16", "fp8", "fp4"])
    assert structure_of(start) == CalibrationParams(unmeasured_dtype_speedup_cap=1.15)


def test_a_dtype_measured_on_one_vendor_is_unmeasured_on_another():
    """measured_compute_dtypes_by_vendor {nvidia: [bf16, fp8, fp4], amd: [fp8]}: on an AMD copy of the synthetic
    device FP4 is held to FP8's 0.7·2000 = 1400 TFLOPS (NVFP4 kernels measured on NVIDIA say nothing of AMD's FP4
    kernels), on the NVIDIA device it keeps the datasheet 0.6·4000 = 2400; a vendor absent from the map has no
    measured dtype, so its FP8 is held to 16 bit, 0.6·1000 = 600 (the FP8 override's 0.7·2000 = 1400 is above)."""
    by_vendor = {"nvidia": ["bf16", "fp8", "fp4"], "amd": ["fp8"]}
    p = params(["bf16", "fp8", "fp4"], measured_compute_dtypes_by_vendor=by_vendor)
    nvidia, amd, intel = device(vendor="nvidia"), device(vendor="amd"), device(vendor="intel")
    assert gemm_s(p, FP4, d=nvidia)[0] == pytest.approx(2 * BODY * TOKENS / 2400e12, rel=1e-12)
    assert gemm_s(p, FP4, d=amd)[0] == pytest.approx(2 * BODY * TOKENS / 1400e12, rel=1e-12)
    assert gemm_s(p, FP8, d=intel)[0] == pytest.approx(2 * BODY * TOKENS / 600e12, rel=1e-12)
    assert "unmeasured on amd devices" in p.unmeasured_dtype_bound(amd, None, "fp4").note(1.0)


def test_the_shipped_file_records_its_rows_dtypes_by_vendor():
    """The shipped parameters list what the fit's rows hold (fit.measured_compute_dtypes_by_vendor on the shipped
    offline + online rows): MI300X's FP8 on AMD; NVIDIA's 16-bit, FP8 and FP4."""
    from optimizer.calibration.fit import measured_compute_dtypes_by_vendor, online_fit_rows
    from optimizer.calibration.predict import offline_skip_reason
    from optimizer.calibration.shipped import SHIPPED_MEASUREMENT_FILES, shipped_measurements

    shipped = load_params(None)
    assert shipped.measured_compute_dtypes == ["bf16", "fp16", "fp4", "fp8"]
    assert shipped.measured_compute_dtypes_by_vendor == {"amd": ["fp8"], "nvidia": ["bf16", "fp16", "fp4", "fp8"]}
    rows = [m for f in SHIPPED_MEASUREMENT_FILES for m in load_measurements(shipped_measurements(f), CAT)]
    fitted = [m for m in rows if offline_skip_reason(m) is None] + online_fit_rows(rows)
    assert measured_compute_dtypes_by_vendor(fitted, CAT) == shipped.measured_compute_dtypes_by_vendor
    assert measured_compute_dtypes(fitted, CAT) == shipped.measured_compute_dtypes
