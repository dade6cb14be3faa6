"""Performance model v4 (issue 14): expert-parallel all-to-all volume, 16-bit attention weights of
expert-only-quantized checkpoints.

Expected values are derived on paper from the formulas in the docstrings of
``optimizer.models.configs`` / ``optimizer.models.perf``, on the synthetic devices and models of
``test_perf_v2``, so each test isolates one effect from the catalog's figures.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from optimizer.models.configs import build_configs
from optimizer.models.moe_routing import remote_ranks_per_token
from optimizer.models.params import CalibrationParams, FactorOverride
from optimizer.models.perf import decode_parts
from tests.models.test_perf_v2 import BF16, ZERO_HOST, dense, device, moe


def test_remote_ranks_per_token_dedups_experts_on_one_rank():
    """Qwen3-235B (E 128, k 8) at ep 4: P0 = C(96, 8)/C(128, 8) = 0.09275, r = 3·(1 − P0) = 2.722
    (one copy per expert would be 8·3/4 = 6); top-1 (Maverick, E 128) at ep 8: r = 7·(1/8) = 0.875
    = k·(e − 1)/e; ep 1: nothing leaves the rank; never more than e − 1."""
    assert float(remote_ranks_per_token(128, 8, 4)) == pytest.approx(2.7218, abs=1e-4)
    assert float(remote_ranks_per_token(128, 1, 8)) == pytest.approx(0.875)
    assert float(remote_ranks_per_token(128, 8, 1)) == 0.0
    assert float(remote_ranks_per_token(256, 8, 64)) <= 8.0  # at most k ranks when e > k
    assert float(remote_ranks_per_token(8, 8, 8)) == pytest.approx(7.0)  # every expert on its own rank


def test_alltoall_time_counts_one_copy_per_remote_rank():
    """moe() with k = 8 of 64 experts at ep 4, 256 decode tokens, link 1000/2 GB/s per direction at
    efficiency 1, no latency: r = 3·(1 − C(48, 8)/C(64, 8)) = 2.7442; each of the 32·2 all-to-alls
    moves r·T/e·hidden·2 B = 2.7442·64·4096·2 B per GPU: 64 · 1.4388 MB / 5e11 B/s = 184.2 µs."""
    m = moe(experts_per_token=8)
    p = CalibrationParams(**ZERO_HOST, link_efficiency=1.0, alltoall_latency_us=0.0)
    c = build_configs(m, [(device(), BF16, 1, 1)], p, ep=4)
    assert float(decode_parts(c, 256.0, 0.0).comm_s[0]) == pytest.approx(184.16e-6, rel=1e-3)


def test_experts_only_checkpoint_keeps_the_body_in_16_bit():
    """moe() with ``unquantized_dense`` in FP4 (0.5625 B/weight): the non-expert body (Model.dense_params)
    is stored at 2 B and the routed experts at 0.5625 B, so weights/GPU = dense·2 + 64·402.65M·0.5625;
    its dense GEMMs run at the 16-bit peak (1000 TFLOP/s, not 4000) with the 16-bit efficiency (0.6, not
    the FP4 override's 0.3): at T tokens their compute side is 2·body_active·T / (1000e12·0.6)."""
    p = CalibrationParams(**ZERO_HOST, compute_efficiency=0.6,
                          overrides=[FactorOverride(compute_dtype="fp4", compute_efficiency=0.3)])
    fp4 = BF16.model_copy(update={"key": "fp4", "weight_bytes_per_param": 0.5625, "compute_dtype": "fp4",
                                  "weight_element_bits": 4})
    plain, kept = moe(), moe(unquantized_dense=True)
    a = build_configs(plain, [(device(), fp4, 1, 1)], p)
    b = build_configs(kept, [(device(), fp4, 1, 1)], p)
    routed = 64 * 3 * 4096 * 1024 * 32
    assert b.weight_bytes_per_gpu[0] == pytest.approx(kept.dense_params * 2 + routed * 0.5625)
    assert a.weight_bytes_per_gpu[0] == pytest.approx(plain.dense_params * 0.5625 + routed * 0.5625, rel=1e-3)
    assert b.dense_peak_flops[0] == 1000e12 and b.dense_compute_efficiency[0] == pytest.approx(0.6)
    assert a.dense_peak_flops[0] == 4000e12 and a.dense_compute_efficiency[0] == pytest.approx(0.3)
    assert b.stage.gemm_flops_s[0] == pytest.approx(600e12)
    assert b.stage.moe_flops_s[0] == pytest.approx(4000e12 * 0.3 * p.moe_efficiency)  # the experts stay FP4


def test_dense_model_refuses_unquantized_dense():
    with pytest.raises(ValidationError, match="unquantized_dense"):
        dense(unquantized_dense=True)


def test_alltoall_latency_defaults_to_the_all_reduce_latency_of_the_link():
    """alltoall_latency_us None (what the fit ships): each of the 64 all-to-alls of the step above starts
    like an all-reduce on NVLink, 8 µs: 184.16 µs + 64·8 µs = 696.16 µs; an explicit 3 µs gives
    184.16 + 192 = 376.16 µs."""
    m = moe(experts_per_token=8)
    tied = CalibrationParams(**ZERO_HOST, link_efficiency=1.0, allreduce_latency_us=8.0)
    own = tied.model_copy(update={"alltoall_latency_us": 3.0})
    for p, want in ((tied, 696.16e-6), (own, 376.16e-6)):
        c = build_configs(m, [(device(), BF16, 1, 1)], p, ep=4)
        assert float(decode_parts(c, 256.0, 0.0).comm_s[0]) == pytest.approx(want, rel=1e-3)


def test_a_generation_override_sets_its_own_alltoall_time():
    """A ``generation`` override with alltoall_latency_us 50 replaces the all-reduce default for that
    class only: 184.16 µs + 64·50 µs = 3384.16 µs at ep 4 (the test above: 696.16 µs with 8 µs)."""
    m = moe(experts_per_token=8)
    p = CalibrationParams(**ZERO_HOST, link_efficiency=1.0, allreduce_latency_us=8.0,
                          overrides=[FactorOverride(generation="synthetic", alltoall_latency_us=50.0)])
    c = build_configs(m, [(device(), BF16, 1, 1), (device("synth2", generation="other"), BF16, 1, 1)], p, ep=4)
    comm = decode_parts(c, 256.0, 0.0).comm_s
    assert float(comm[0]) == pytest.approx(3384.16e-6, rel=1e-3)
    assert float(comm[1]) == pytest.approx(696.16e-6, rel=1e-3)
