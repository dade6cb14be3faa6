"""Performance model v9 (issue 14): the expert-parallel MoE communication of an attention-DP replica as
TensorRT-LLM runs it (``CalibrationParams.ep_allgather``): every token all-gathered to every rank in the
experts' input format, the outputs reduce-scattered back in BF16.

Expected values are derived on paper from the docstrings of ``optimizer.models.moe_routing`` and
``optimizer.models.configs``, on the synthetic device and model of ``test_perf_v2`` (moe(): 64 experts,
hidden 4096, 32 MoE layers; link 1000 GB/s bidirectional = 500 GB/s per direction).
"""

from __future__ import annotations

import pytest

from optimizer.calibration.calibrate import structure_of
from optimizer.models.configs import build_configs
from optimizer.models.moe_routing import (
    dispatch_bytes_per_element,
    ranks_receiving_token,
    remote_ranks_per_token,
)
from optimizer.models.params import CalibrationParams
from optimizer.models.perf import (
    _decode_step,
    busiest_rank_prompts,
    decode_parts,
    decode_step_s,
    offline_step_s,
)
from tests.models.test_perf_v2 import BF16, CAT, FP4, FP8, ZERO_HOST, dense, device, moe


def test_an_all_gather_sends_every_token_to_every_other_rank():
    """DeepSeek-R1 (E 256, k 8) at ep 8: all-gather 7 copies whatever the routing; the per-rank dispatch
    7·(1 − C(224, 8)/C(256, 8)) = 7·(1 − 0.33817) = 4.633; Maverick (k 1) at ep 8: 7 against 0.875;
    ep 1 or a dense model: nothing leaves the rank."""
    assert float(ranks_receiving_token(256, 8, 8, allgather=True)) == 7.0
    assert float(ranks_receiving_token(256, 8, 8, allgather=False)) == pytest.approx(4.633, abs=1e-3)
    assert float(ranks_receiving_token(128, 1, 8, allgather=True)) == 7.0
    assert float(ranks_receiving_token(128, 1, 8, allgather=False)) == float(remote_ranks_per_token(128, 1, 8))
    assert float(ranks_receiving_token(128, 8, 1, allgather=True)) == 0.0
    assert float(ranks_receiving_token(0, 0, 8, allgather=True)) == 0.0


@pytest.mark.parametrize(("compute_dtype", "weight_only", "stored", "want"), [
    ("fp8", False, 1.0, 1.0),  # FP8 per-tensor: quantized before the gather
    ("int8", False, 1.0, 1.0),
    ("fp4", False, 0.5625, 0.5625),  # NVFP4: 4 bits + one E4M3 scale per 16 elements
    ("fp4", False, 0.53125, 0.53125),  # MXFP4: 4 bits + one E8M0 scale per 32
    ("bf16", False, 2.0, 2.0),
    ("bf16", True, 0.51953125, 2.0),  # W4A16: the activations stay 16 bit
])
def test_dispatch_payload_is_the_experts_input_format(compute_dtype, weight_only, stored, want):
    assert dispatch_bytes_per_element(compute_dtype, weight_only, stored) == pytest.approx(want)


def _comm_s(precision, allgather: bool, latency_us: float = 0.0) -> float:
    p = CalibrationParams(**ZERO_HOST, link_efficiency=1.0, alltoall_latency_us=latency_us, ep_allgather=allgather)
    c = build_configs(moe(experts_per_token=8), [(device(), precision, 1, 1)], p, ep=4)
    return float(decode_parts(c, 256.0, 0.0).comm_s[0])


def test_all_gather_comm_time_in_bf16():
    """256 decode tokens at ep 4 (64 per rank), BF16 both ways: each of the 32·2 collectives moves
    (e − 1)·T/e·hidden·2 B = 3·64·4096·2 = 1,572,864 B per GPU at 5e11 B/s = 3.1457 µs: 201.3 µs a step
    (the per-rank dispatch of test_perf_v4 gives 184.16 µs with r = 2.7442); 10 µs latency adds 640 µs."""
    assert _comm_s(BF16, True) == pytest.approx(201.33e-6, rel=1e-3)
    assert _comm_s(BF16, False) == pytest.approx(184.16e-6, rel=1e-3)
    assert _comm_s(BF16, True, latency_us=10.0) == pytest.approx(841.33e-6, rel=1e-3)


def test_all_gather_comm_time_with_quantized_dispatch():
    """FP8: dispatch 1 B + combine 2 B, mean 1.5 B per element: 201.33·1.5/2 = 151.0 µs; NVFP4:
    (0.5625 + 2)/2 = 1.28125 B: 201.33·1.28125/2 = 128.98 µs. Without the flag both stay 16 bit (184.16 µs)."""
    assert _comm_s(FP8, True) == pytest.approx(151.0e-6, rel=1e-3)
    assert _comm_s(FP4, True) == pytest.approx(128.98e-6, rel=1e-3)
    assert _comm_s(FP8, False) == pytest.approx(184.16e-6, rel=1e-3)


def test_the_flag_leaves_dense_and_single_rank_replicas_alone():
    """No all-to-all at ep 1 or for a dense model: the step is the same bits with and without the flag."""
    on = CalibrationParams(**ZERO_HOST, ep_allgather=True)
    off = CalibrationParams(**ZERO_HOST)
    for model, ep, tp in ((moe(experts_per_token=8), 1, 2), (dense(), 1, 4)):
        a = build_configs(model, [(device(), FP8, tp, 1)], on, ep=ep)
        b = build_configs(model, [(device(), FP8, tp, 1)], off, ep=ep)
        assert float(decode_parts(a, 64.0, 512.0, 128.0, 64.0).step_s[0]) == float(
            decode_parts(b, 64.0, 512.0, 128.0, 64.0).step_s[0])


def test_prefill_chunks_start_as_units_of_the_token_budget():
    """offline_prefill_chunk_tokens M: moe() at ep 8, b 800 (100 per rank), input 8192, output 1024. Whole
    prompts: λ = 100/1024 = 0.09766 per rank and step, the busiest rank e·n1·8192 tokens; chunks of
    M = 2048: λ = 100·4/1024 = 0.3906 chunks, e·λ = 3.125, P0 = e^(−3.125) = 0.04394, the busiest rank
    e·n1·2048 tokens. M at or above the prompt gives the whole-prompt step, the same bits."""
    base = dict(**ZERO_HOST, offline_whole_prompts=True, alltoall_latency_us=0.0)
    whole = build_configs(moe(), [(device(), BF16, 1, 1)], CalibrationParams(**base), ep=8)
    same = build_configs(moe(), [(device(), BF16, 1, 1)],
                         CalibrationParams(**base, offline_prefill_chunk_tokens=8192.0), ep=8)
    chunked = build_configs(moe(), [(device(), BF16, 1, 1)],
                            CalibrationParams(**base, offline_prefill_chunk_tokens=2048.0), ep=8)
    step = {name: float(offline_step_s(c, 800.0, 8192.0, 1024.0)[0])
            for name, c in (("whole", whole), ("same", same), ("chunked", chunked))}
    assert step["same"] == step["whole"]
    p0, n1 = busiest_rank_prompts(100.0 * 4 / 1024, 8.0)
    assert float(p0) == pytest.approx(0.04394, rel=1e-3)
    ctx = 8192.0 + 512.0
    idle = float(decode_step_s(chunked, 800.0, ctx)[0])
    mean_tokens = 800.0 * 8.0 / (1.0 - float(p0))
    busy = float(_decode_step(chunked, 800.0, ctx, mean_tokens, 4096.0, 8.0 * float(n1) * 2048.0, sides=False).step_s[0])
    assert step["chunked"] == pytest.approx(float(p0) * idle + (1.0 - float(p0)) * busy, rel=1e-12)
    assert step["chunked"] < step["whole"]  # the busiest rank carries ~1.7 chunks, not a whole 8k prompt


def test_calibrate_keeps_the_ep_structure_in_its_leave_out_refits():
    """``gpuplan calibrate`` restarts every leave-out refit from the defaults plus the start's structure:
    ep_allgather and offline_prefill_chunk_tokens travel with offline_whole_prompts, the fitted 0.41 does not."""
    start = CalibrationParams(memory_bandwidth_efficiency=0.41, offline_whole_prompts=True, ep_allgather=True,
                              offline_prefill_chunk_tokens=2048.0)
    assert structure_of(start) == CalibrationParams(offline_whole_prompts=True, ep_allgather=True,
                                                    offline_prefill_chunk_tokens=2048.0)


def test_deepseek_r1_dep8_all_gather_bytes_per_token():
    """DeepSeek-R1 FP8 on H200 at ep 8 (catalog figures: hidden 7168, 58 MoE layers): an all-gather
    token costs each rank 7/8 · 7168 · (1 + 2)/2 B = 9408 B per collective, against the per-rank
    dispatch's 4.6328 · 7168 · 2/8 = 8302 B in 16 bit; 2 · 58 collectives per step."""
    model, h200, fp8 = CAT.model("deepseek-r1"), CAT.devices["h200-sxm"], CAT.precision("fp8")
    on = build_configs(model, [(h200, fp8, 1, 1)], CalibrationParams(ep_allgather=True), ep=8)
    off = build_configs(model, [(h200, fp8, 1, 1)], CalibrationParams(), ep=8)
    assert on.stage.a2a_factor[0] == pytest.approx(9408.0)
    assert off.stage.a2a_factor[0] == pytest.approx(4.63282 * 7168 * 2 / 8, rel=1e-5)
    assert on.stage.alltoalls[0] == 116.0
