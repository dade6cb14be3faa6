"""Performance model: golden values from DESIGN.md §1 and model configs, and physical behaviour.

Synthetic devices isolate each effect from catalog figures; tolerances are stated per test.
"""

from __future__ import annotations

import numpy as np
import pytest

from catalog import load_catalog
from catalog.schema import Device, Model, Source
from optimizer.models.configs import build_configs, config_key
from optimizer.models.estimate import estimate_config
from optimizer.models.moe_routing import experts_touched
from optimizer.models.params import CalibrationParams, FactorOverride, load_params
from optimizer.models.perf import (
    bound_kind,
    decode_step_s,
    max_sequences,
    offline_throughput_tokens_s,
    prefill_s,
    tpot_bound_ms,
)

SRC = Source(source="synthetic test figure", as_of="2026")
CAT = load_catalog()
BF16, FP16, FP8, INT4 = (CAT.precision(k) for k in ("bf16", "fp16", "fp8", "int4"))


def device(key: str = "synth", bw_tb_s: float = 2.0, **kw) -> Device:
    data = dict(key=key, name=key, vendor="other", generation="synthetic", memory_type="hbm",
                memory_gb=80.0, memory_bandwidth_tb_s=bw_tb_s, bf16_tflops=1000.0, fp8_tflops=2000.0,
                interconnect_kind="nvlink", interconnect_gb_s=900.0, interconnect_domain_gpus=8,
                pcie_gb_s=64.0, gpus_per_node=8, sources={"specs": SRC})
    data.update(kw)
    return Device(**data)


def model70(total_b: float = 70.0, **kw) -> Model:
    """A 70e9-parameter dense model with Llama-3.1-70B's shape (80 layers, 8192 hidden, GQA 8)."""
    data = dict(key="synth-70b", hf_id="synth/70b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                num_kv_heads=8, head_dim=128, intermediate_size=28672, vocab_size=128256,
                total_params_b=total_b, active_params_b=total_b, max_context_tokens=131072, source=SRC)
    data.update(kw)
    return Model(**data)


PARAMS = CalibrationParams()


# --- DESIGN.md §1 arithmetic: 70e9 params x 2 bytes / bandwidth ------------------------

VH = 128256 * 8192  # vocab x hidden of model70: one embedding matrix (the input one is a lookup, not read)


@pytest.mark.parametrize(("bw_tb_s", "precision", "expected_ms"), [
    # "70B params x 2 bytes (FP16) / 2.0 TB/s (A100) ~ 70 ms/token", less the input embedding
    # (1.05e9 params) that a step looks up rather than reads: (140e9 - 2·VH)/2e12 = 68.95 ms
    (2.0, FP16, (140e9 - 2 * VH) / 2.0e12 * 1e3),
    (3.35, FP16, (140e9 - 2 * VH) / 3.35e12 * 1e3),  # "on H100 (3.35 TB/s) ~ 42 ms": 41.16
    # "in FP8 on H100 ~ 21 ms": body (70e9 - 2·VH) x 1 B + lm_head VH x 2 B (BF16) = 70e9 B -> 20.90 ms
    (3.35, FP8, 70e9 / 3.35e12 * 1e3),
])
def test_tpot_bound_design_arithmetic(bw_tb_s, precision, expected_ms):
    c = build_configs(model70(), [(device(bw_tb_s=bw_tb_s, fp16_tflops=1000.0), precision, 1, 1)],
                      CalibrationParams(memory_usable_fraction=1.0))
    assert tpot_bound_ms(c)[0] == pytest.approx(expected_ms, rel=1e-3)


def test_tpot_bound_splits_over_tp_not_pp():
    """TP divides the bytes each GPU reads; PP stages are in series, so latency stays W/(t·bw)."""
    d = device(bw_tb_s=2.0)
    c = build_configs(model70(), [(d, BF16, 1, 1), (d, BF16, 4, 1), (d, BF16, 1, 4)], PARAMS)
    w = (140e9 - 2 * VH) / 2.0e12 * 1e3  # 68.95 ms (see test_tpot_bound_design_arithmetic)
    assert tpot_bound_ms(c) == pytest.approx([w, w / 4, w], rel=1e-6)


# --- KV cache bytes per token ----------------------------------------------------------

def test_kv_bytes_mha_fp16():
    """2 (K,V) x 80 layers x 64 heads x 128 head_dim x 2 bytes = 2,621,440 (full MHA, hidden 8192)."""
    m = model70(num_kv_heads=64)
    c = build_configs(m, [(device(fp16_tflops=1000.0), FP16, 8, 1)], PARAMS)
    assert c.kv_bytes_per_token[0] == 2_621_440


def test_kv_bytes_llama31_70b_bf16():
    """Llama-3.1-70B, 8 KV heads: 2 x 80 x 8 x 128 x 2 = 327,680 (models.csv column kv_cache_bytes_per_token_bf16)."""
    c = build_configs(CAT.model("llama-3.1-70b"), [(CAT.device("h100-sxm"), BF16, 4, 1)], PARAMS)
    assert c.kv_bytes_per_token[0] == 327_680
    c8 = build_configs(CAT.model("llama-3.1-70b"), [(CAT.device("h100-sxm"), FP8, 4, 1)], PARAMS)
    assert c8.kv_bytes_per_token[0] == 163_840  # FP8 KV cache


def test_memory_fit_and_capacity():
    """KV capacity = (usable − weights/(t·p) − workspace) / (kv per token per GPU), per the docstring."""
    p = CalibrationParams(memory_usable_fraction=0.9, workspace_gb_per_gpu=2.0)
    m = model70()
    d = device()
    c = build_configs(m, [(d, BF16, 1, 1), (d, BF16, 2, 1), (d, BF16, 4, 1), (d, BF16, 2, 2)], p)
    assert list(c.fits) == [False, True, True, True]
    assert "raise tp/pp" in c.reason[0]
    gib = 2**30
    free_tp2 = 80 * gib * 0.9 - 70e9 - 2 * gib
    assert c.kv_capacity_tokens[1] == pytest.approx(free_tp2 / (327_680 / 2))
    assert max_sequences(c, 2000)[1] == int(free_tp2 / (327_680 / 2) // 2000)
    # tp2·pp2 splits weights and KV four ways: more capacity than tp2 alone
    assert c.kv_capacity_tokens[3] > 2 * c.kv_capacity_tokens[1]


def test_expert_parallel_ranks_hold_whole_sequences():
    """Each of an ep replica's attention data-parallel ranks holds its own sequences' KV: Mixtral FP8 at ep8 on a
    device whose every GPU has room for a quarter of one 32,000-token sequence (2.097 GB / 4 = 0.524 GB) holds no
    sequence. The pooled capacity (8 · 0.524 GB = 64,000 tokens) counted floor(64,000 / 32,000) = 2 and `estimate`
    said it fits."""
    from optimizer.models.memory_fit import GIB_BYTES

    p = load_params(None)
    m, d = CAT.model("mixtral-8x7b"), CAT.device("h100-sxm")
    c = build_configs(m, [(d, FP8, 1, 1)], p, ep=[8])
    seq_bytes = 32_000 * 131_072 / 2  # 32 layers · 8 KV heads · 128 · 2 (K, V) · 1 B (FP8 KV)
    assert c.kv_bytes_per_token[0] * 32_000 == seq_bytes
    free = c.weight_bytes_per_gpu[0] + p.workspace_gb_per_gpu * GIB_BYTES + seq_bytes / 4
    small = d.model_copy(update={"memory_gb": free / (GIB_BYTES * p.memory_usable_fraction)})
    c = build_configs(m, [(small, FP8, 1, 1), (small, FP8, 1, 1)], p, ep=[8, 1])
    assert c.kv_capacity_tokens[0] == pytest.approx(64_000)
    assert list(max_sequences(c, 32_000)) == [0, 0]
    assert list(max_sequences(c, 4_000)) == [8 * 2, 0]  # 8,000 tokens a rank: two 4,000-token sequences each
    out = estimate_config(m, small, FP8, 1, 1, 31_000, 1_000, p, devices=CAT.devices, ep=8, batch=1)
    assert out["fits"] is False and out["max_concurrency"] == 0 and out["tpot_ms"] is None


# --- step-time behaviour ----------------------------------------------------------------

def test_throughput_linear_while_memory_bound_then_flat_at_compute_roof():
    """Decode throughput b/t_step grows ~linearly with batch while memory-bound, then flattens
    at the compute roof eff·peak/(2·params) (DESIGN.md §1 'Batching reuses each fetched byte')."""
    p = CalibrationParams(step_overhead_ms=0.0, sequence_overhead_us=0.0)
    c = build_configs(model70(total_b=8.0), [(device(bw_tb_s=2.0), BF16, 1, 1)], p)
    batch = np.array([[1, 2, 4, 8, 16, 2048, 4096, 8192]], dtype=float)
    tput = batch / decode_step_s(c, batch, 0.0)
    assert tput[0, 1] / tput[0, 0] == pytest.approx(2.0, rel=0.02)
    assert tput[0, 4] / tput[0, 0] == pytest.approx(16.0, rel=0.05)
    roof = p.compute_efficiency * 1000e12 / (2 * (8e9 - VH))  # the input embedding is a lookup, no FLOPs
    assert tput[0, -1] == pytest.approx(roof, rel=0.02)
    assert tput[0, -1] / tput[0, -2] == pytest.approx(1.0, abs=0.02)
    assert list(bound_kind(c, batch, 0.0)[0][[0, -1]]) == ["memory", "compute"]


def test_tp_over_pcie_slower_than_nvlink():
    """Same figures, tp4 inside an NVLink domain vs beyond a 2-GPU bridge (falls back to PCIe)."""
    nv = device("nv", interconnect_domain_gpus=8)
    pc = device("pc", interconnect_domain_gpus=2)
    c = build_configs(model70(), [(nv, BF16, 4, 1), (pc, BF16, 4, 1)], PARAMS)
    t = decode_step_s(c, 64, 1000)
    assert t[1] > t[0]
    assert c.link_bytes_s[1] == pytest.approx(64e9 / 2 * PARAMS.link_efficiency)
    assert bound_kind(c, 512, 1000)[1] == "communication"


def test_fp8_rejected_without_fp8_tflops():
    a100_like = device("old", fp8_tflops=None)
    c = build_configs(model70(), [(a100_like, FP8, 4, 1), (a100_like, INT4, 4, 1)], PARAMS)
    assert not c.runnable[0] and "no native fp8" in c.reason[0]
    assert np.isnan(decode_step_s(c, 1, 100)[0])
    assert c.runnable[1]  # int4 is weight-only: 16-bit compute runs anywhere
    assert c.peak_flops[1] == 1000e12


def test_int4_reads_its_stored_bits_of_bf16():
    """AWQ int4 (group 128: fp16 scale + 4-bit zero per group) stores 4.156 bits/weight: 4.156/16 of bf16
    for the body; the lm_head (VH params) stays BF16 in both."""
    d = device()
    c = build_configs(model70(), [(d, BF16, 8, 1), (d, INT4, 8, 1)], PARAMS)
    body = 70e9 - 2 * VH
    ratio = (body * (4 + 20 / 128) / 8 + VH * 2) / (body * 2 + VH * 2)
    assert tpot_bound_ms(c)[1] == pytest.approx(tpot_bound_ms(c)[0] * ratio)


def test_moe_bytes_grow_with_experts_touched():
    """Mixtral 8x7B: at batch 1 ~active params are read, at large batch ~all experts:
    E·(1 − (1 − k/E)^B) → 2 at B=1, → 8 at B=64."""
    assert experts_touched(8, 2, 1) == pytest.approx(2.0)
    assert experts_touched(8, 2, 64) == pytest.approx(8.0, rel=1e-6)
    mix = CAT.model("mixtral-8x7b")
    c = build_configs(mix, [(CAT.device("h100-sxm"), BF16, 2, 1)], CalibrationParams(step_overhead_ms=0.0))
    active_ms = mix.active_params_b * 1e9 * 2 / 2 / 3.35e12 * 1e3
    assert tpot_bound_ms(c)[0] == pytest.approx(active_ms, rel=0.03)  # dense part + 2 experts ~ active
    small, big = decode_step_s(c, np.array([[1.0, 64.0]]), 0.0)[0]
    assert big / small > 2.5  # 8 experts' bytes instead of 2


def test_prefill_quadratic_attention_term():
    c = build_configs(model70(), [(device(), BF16, 4, 1)], CalibrationParams(step_overhead_ms=0.0))
    t1, t2 = prefill_s(c, np.array([[8000.0, 16000.0]]))[0]
    assert t2 / t1 > 2.0  # linear FLOPs double, the attention term quadruples


def test_broadcasting_shapes_and_keys():
    d = CAT.device("h100-sxm")
    c = build_configs(CAT.model("llama-3.1-8b"), [(d, FP8, 1, 1), (d, BF16, 2, 1)], PARAMS)
    assert c.keys == ["h100_sxm__fp8__tp1__pp1", "h100_sxm__bf16__tp2__pp1"]
    assert config_key(d, FP8, 4, 1) == "h100_sxm__fp8__tp4__pp1"
    assert decode_step_s(c, 8, 100).shape == (2,)
    assert decode_step_s(c, np.array([8, 16]), 100).shape == (2,)
    assert decode_step_s(c, np.ones((2, 5)), 100).shape == (2, 5)
    assert prefill_s(c, np.full((2, 3), 512.0)).shape == (2, 3)
    assert bound_kind(c, np.ones((2, 4)), 100).shape == (2, 4)


def test_overrides_apply_by_class_not_key():
    p = CalibrationParams(memory_bandwidth_efficiency=0.8,
                          overrides=[FactorOverride(memory_type="gddr", memory_bandwidth_efficiency=0.5)])
    c = build_configs(CAT.model("llama-3.1-8b"), [(CAT.device("l40s"), FP8, 1, 1), (CAT.device("h100-sxm"), FP8, 1, 1)], p)
    assert list(c.memory_bandwidth_efficiency) == [0.5, 0.8]
    with pytest.raises(ValueError):
        FactorOverride(memory_bandwidth_efficiency=0.5)


def test_offline_throughput_memory_limited():
    """A long-output offline run on a tight fit is limited by KV capacity, not bandwidth."""
    m = CAT.model("llama-3.1-70b")
    d = CAT.device("a100-80gb-sxm")
    c = build_configs(m, [(d, FP16, 2, 1), (d, FP16, 8, 1)], load_params())
    batch, tput = offline_throughput_tokens_s(c, 128, 2048)
    assert batch[0] < 64 and batch[1] > 5 * batch[0]
    assert tput[1] > 5 * tput[0]


@pytest.mark.parametrize("dev", sorted(CAT.devices))
def test_estimate_every_device_and_model(dev):
    """estimate_config runs for every catalog device x model x precision without NaN in JSON."""
    import json

    for model in CAT.models.values():
        for prec in CAT.precisions.values():
            out = estimate_config(model, CAT.devices[dev], prec, 8, 1, 1000, 200, PARAMS, devices=CAT.devices, batch=8)
            json.dumps(out, allow_nan=False)
            assert out["fits"] == (out["reason"] is None)
            if out["fits"]:
                assert out["tpot_ms"] > out["tpot_bound_ms"] > 0


def test_estimate_rates_expert_parallelism_as_the_plan_does():
    """estimate_config's fidelity follows its ep like the planner's (``fidelity_of(..., ep=)``): A100/TensorRT-LLM
    was measured, with a MoE model (Mixtral) but never with ep > 1, so an ep8 estimate of a MoE model is class
    same-generation and a tp8 one measured. On MI300X/vLLM, measured with dense models only, both are
    datasheet-only (``fidelity.for_kernels``)."""
    model, dev, prec = CAT.model("qwen3-30b-a3b"), CAT.devices["a100-80gb-sxm"], CAT.precision("bf16")
    shipped = load_params(None)
    tp8 = estimate_config(model, dev, prec, 8, 1, 1000, 200, shipped, devices=CAT.devices, max_throughput=True)
    ep8 = estimate_config(model, dev, prec, 1, 1, 1000, 200, shipped, devices=CAT.devices, max_throughput=True, ep=8)
    assert tp8["fidelity"]["class"] == "measured"
    assert ep8["fidelity"]["class"] == "same-generation" and "never with expert parallelism" in ep8["fidelity"]["basis"]
    mi300x = CAT.devices["mi300x"]
    for tp, ep in ((8, 1), (1, 8)):
        out = estimate_config(model, mi300x, prec, tp, 1, 1000, 200, shipped, devices=CAT.devices, max_throughput=True,
                              engine="vllm", ep=ep)
        assert out["fidelity"]["class"] == "datasheet-only", (tp, ep)
