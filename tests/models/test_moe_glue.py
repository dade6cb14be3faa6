"""The MoE routing glue (``CalibrationParams.moe_glue_bytes_per_element``): a memory-bound term beside the
grouped GEMMs, T·k·hidden·moe_layers·g/(p·e) / (bw·e_bw) per step (``optimizer.models.perf._gemm_s``).

Expected values are derived on paper on the synthetic device and models of ``test_perf_v2``
(bandwidth 4 TB/s; the MoE: hidden 4096, top-2, 32 MoE layers)."""

from __future__ import annotations

import pytest

from optimizer.calibration.fit import MOE_GLUE_START_BYTES
from optimizer.models.configs import build_configs
from optimizer.models.params import CalibrationParams
from optimizer.models.perf import decode_parts
from tests.models.test_perf_v2 import BF16, ZERO_HOST, dense, device, moe


def _gemm_s(model, glue: float, ep: int = 1, tokens: float = 256.0) -> tuple[float, float]:
    p = CalibrationParams(**ZERO_HOST, memory_bandwidth_efficiency=0.5, moe_glue_bytes_per_element=glue)
    parts = decode_parts(build_configs(model, [(device(), BF16, 1, 1)], p, ep=ep), tokens, 0.0)
    return float(parts.gemm_s[0]), float(parts.mem_s[0])


def test_glue_adds_its_bytes_at_the_achieved_bandwidth():
    """256 tokens, g = 10 B: 256·2·4096·32·10 B = 671.09 MB per GPU at 4e12·0.5 B/s = 335.54 µs, on the
    memory side too; ep 2 splits the tokens' glue over the two ranks (167.77 µs per GPU)."""
    base, base_mem = _gemm_s(moe(), 0.0)
    with_glue, with_mem = _gemm_s(moe(), 10.0)
    assert with_glue - base == pytest.approx(335.544e-6, rel=1e-5)
    assert with_mem - base_mem == pytest.approx(335.544e-6, rel=1e-5)
    assert _gemm_s(moe(), 10.0, ep=2)[0] - _gemm_s(moe(), 0.0, ep=2)[0] == pytest.approx(167.772e-6, rel=1e-5)


def test_glue_is_linear_in_tokens_and_absent_from_dense_models():
    """Twice the tokens, twice the glue (1024 vs 512 tokens at g = 8); a dense model has no MoE layer."""
    d512 = _gemm_s(moe(), 8.0, tokens=512.0)[0] - _gemm_s(moe(), 0.0, tokens=512.0)[0]
    d1024 = _gemm_s(moe(), 8.0, tokens=1024.0)[0] - _gemm_s(moe(), 0.0, tokens=1024.0)[0]
    assert d1024 == pytest.approx(2.0 * d512, rel=1e-9)
    assert _gemm_s(dense(), 8.0) == _gemm_s(dense(), 0.0)


def test_calibrate_starts_the_glue_at_the_hand_count():
    """7-9 B per routed pair and hidden element (fit.MOE_GLUE_START_BYTES's comment): the start is inside it."""
    assert 7.0 <= MOE_GLUE_START_BYTES <= 9.0
