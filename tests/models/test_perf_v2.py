"""Performance model v2 (issue 14): per-operator rooflines, efficiencies by GEMM dtype and engine,
expert parallelism, sliding windows, batch caps, fidelity classes.

Expected values are derived on paper from the formulas in ``optimizer.models.perf``'s docstring
on synthetic devices, so each test isolates one effect from the catalog's figures.
"""

from __future__ import annotations

import numpy as np
import pytest

from catalog import load_catalog
from catalog.schema import Device, Model, Source
from optimizer.models.attention import (
    attention_flops_per_context_token,
    decode_attention_flops_per_context_token,
)
from optimizer.models.configs import build_configs, config_key
from optimizer.models.fidelity import fidelity_of
from optimizer.models.params import (
    CalibrationParams,
    Coverage,
    ErrorBand,
    FactorOverride,
    default_engine,
)
from optimizer.models.perf import decode_parts, decode_step_s, offline_batch, smooth_max

SRC = Source(source="synthetic test figure", as_of="2026")
CAT = load_catalog()
BF16, FP8, FP4 = (CAT.precision(k) for k in ("bf16", "fp8", "fp4"))
ZERO_HOST = dict(step_overhead_ms=0.0, sequence_overhead_us=0.0)


def device(key: str = "synth", vendor: str = "other", **kw) -> Device:
    data = dict(key=key, name=key, vendor=vendor, generation="synthetic", memory_type="hbm",
                memory_gb=192.0, memory_bandwidth_tb_s=4.0, bf16_tflops=1000.0, fp8_tflops=2000.0,
                fp4_tflops=4000.0, interconnect_kind="nvlink", interconnect_gb_s=1000.0,
                interconnect_domain_gpus=8, pcie_gb_s=64.0, gpus_per_node=8, sources={"specs": SRC})
    data.update(kw)
    return Device(**data)


def dense(**kw) -> Model:
    """An 8e9-parameter dense model, vocab·hidden = 2^20 (tiny embedding), 32 layers, GQA 8."""
    data = dict(key="synth-8b", hf_id="synth/8b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                num_kv_heads=8, head_dim=128, intermediate_size=14336, vocab_size=256,
                total_params_b=8.0, active_params_b=8.0, max_context_tokens=131072, source=SRC)
    data.update(kw)
    return Model(**data)


def test_smooth_max_formula():
    """(a^n + b^n)^(1/n): n = 2 of (3, 4) is 5; n >= 64 is the plain max; never below the max."""
    assert smooth_max(3.0, 4.0, 2.0) == pytest.approx(5.0)
    assert smooth_max(3.0, 4.0, 64.0) == 4.0
    assert smooth_max(np.array([0.0, 1.0]), np.array([0.0, 1.0]), 4.0) == pytest.approx([0.0, 2 ** 0.25])


def test_decode_step_is_a_sum_of_operator_rooflines():
    """At batch 512 and context 512 the GEMMs are compute-bound (8.2 ms) while attention is
    memory-bound (8.6 ms): the step is gemm_compute + kv_read = 16.8 ms, not max(all bytes, all
    FLOPs) = 12.6 ms (issue 14, item 1).

    bf16, eff 1: GEMM FLOPs = 2·(8e9 − 2·256·4096)·512 / 1e15 s; KV = 512·512·131072 B / 4e12 B/s
    (2·32·8·128·2 = 131072 B/token); weights 2·(8e9 − 256·4096) B / 4e12 = 4 ms < GEMM time.
    """
    p = CalibrationParams(memory_bandwidth_efficiency=1.0, compute_efficiency=1.0, attention_efficiency=1.0,
                          **ZERO_HOST)
    c = build_configs(dense(), [(device(), BF16, 1, 1)], p)
    gemm = 2 * (8e9 - 2 * 256 * 4096) * 512 / 1000e12 + 2 * 256 * 4096 * 512 / 1000e12  # body + lm_head
    kv = 512 * 512 * 131072 / 4e12
    parts = decode_parts(c, 512, 512.0)
    assert parts.gemm_s[0] == pytest.approx(gemm, rel=1e-9)
    assert parts.attn_s[0] == pytest.approx(kv, rel=1e-9)
    assert decode_step_s(c, 512, 512.0)[0] == pytest.approx(gemm + kv, rel=1e-9)
    one_max = max(parts.mem_s[0], parts.compute_s[0])
    assert decode_step_s(c, 512, 512.0)[0] > 1.3 * one_max  # the single max hid a quarter of the step


def test_compute_efficiency_by_gemm_dtype():
    """An override with compute_dtype=fp4 sets the FP4 GEMM efficiency alone: the compute-bound
    roof of fp4 is peak_fp4·e_fp4, of fp8 peak_fp8·e (FP4 at 0.3 of 4000 = 1.2 PF < FP8's 2000·0.6)."""
    p = CalibrationParams(compute_efficiency=0.6, overrides=[FactorOverride(compute_dtype="fp4", compute_efficiency=0.3)],
                          **ZERO_HOST)
    d = device()
    c = build_configs(dense(), [(d, FP8, 1, 1), (d, FP4, 1, 1)], p)
    assert list(c.compute_efficiency) == [0.6, 0.3]
    step = decode_step_s(c, np.array([8192.0, 8192.0]), 0.0)  # compute-bound: step ∝ 1/(peak·eff)
    assert step[1] / step[0] == pytest.approx((2000 * 0.6) / (4000 * 0.3), rel=0.02)


def test_engine_selects_overrides_and_defaults_per_vendor():
    """NVIDIA devices default to trtllm, others to vllm; an engine=vllm override applies only to vllm."""
    nv, amd = device("nv", vendor="nvidia"), device("amd", vendor="amd")
    assert (default_engine(nv), default_engine(amd)) == ("trtllm", "vllm")
    p = CalibrationParams(memory_bandwidth_efficiency=0.8,
                          overrides=[FactorOverride(engine="vllm", memory_bandwidth_efficiency=0.4)], **ZERO_HOST)
    c = build_configs(dense(), [(nv, BF16, 1, 1), (nv, BF16, 1, 1), (amd, BF16, 1, 1)], p,
                      engines=[None, "vllm", None])
    assert c.engines == ["trtllm", "vllm", "vllm"]
    assert list(c.memory_bandwidth_efficiency) == [0.8, 0.4, 0.4]
    # batch 1 is bandwidth-bound: half the efficiency, twice the step
    step = decode_step_s(c, 1.0, 0.0)
    assert step[1] / step[0] == pytest.approx(2.0, rel=1e-5)  # (the BF16 lm_head FLOPs do not scale)
    assert c.keys[1] == config_key(nv, BF16, 1, 1, "vllm") == "nv__bf16__tp1__pp1__vllm"
    assert c.keys[0] == "nv__bf16__tp1__pp1"


def test_max_batch_caps_the_offline_batch():
    """--max-batch (vLLM max_num_seqs): the offline batch is min(cap, what fits)."""
    c = build_configs(dense(), [(device(), BF16, 1, 1)] * 2, CalibrationParams(), max_batch=[None, 64])
    b = offline_batch(c, 128, 128)
    assert b[0] > 64 and b[1] == 64


def moe(**kw) -> Model:
    """A 64-expert top-2 MoE: experts 3·4096·1024·32 = 402.7M params each (25.8e9 routed)."""
    data = dict(key="synth-moe", hf_id="synth/moe", num_layers=32, hidden_size=4096, num_attention_heads=32,
                num_kv_heads=8, head_dim=128, intermediate_size=1024, vocab_size=256, total_params_b=28.0,
                active_params_b=3.0, num_experts=64, experts_per_token=2, moe_intermediate_size=1024,
                moe_layers=32, max_context_tokens=131072, source=SRC)
    data.update(kw)
    return Model(**data)



def test_batch_cap_is_per_attention_rank():
    """A DEP replica schedules per attention rank: DEP8 at max_batch_size 384 runs 8 · 384 = 3072
    sequences (TensorRT-LLM's DeepSeek-R1 blog: --ep 8, enable_attention_dp, max_batch_size 384,
    --concurrency 3072), and ep 8 at the engine default cap runs 8 × that default.

    KV fits far more: synth-moe KV is 2·32·8·128·2 = 131072 B/token, 192 GiB·0.92 − weights per GPU
    leaves > 100 GB per rank, > 800k tokens per rank, ~ 3,000 sequences of 256 tokens per rank.
    """
    d = device()
    p = CalibrationParams(max_batch_sequences=100)
    c = build_configs(moe(), [(d, BF16, 1, 1)] * 3, p, ep=[8, 8, 1], max_batch=[384, None, 384])
    assert list(c.batch_cap) == [3072.0, 800.0, 384.0]
    assert list(offline_batch(c, 128, 128)) == [3072.0, 800.0, 384.0]

def test_expert_parallel_splits_experts_and_multiplies_kv():
    """ep 4: each GPU holds the dense part whole and 1/4 of the experts; attention is data-parallel,
    so the KV capacity is 4 GPUs' free memory; the replica has 4 GPUs and an all-to-all per MoE layer."""
    m = moe()
    d = device()
    p = CalibrationParams(**ZERO_HOST)
    c = build_configs(m, [(d, BF16, 1, 1), (d, BF16, 1, 1)], p, ep=[1, 4])
    routed = 64 * 3 * 4096 * 1024 * 32
    dense_b = m.dense_params * 2  # the dense part from the shapes (Model.dense_params), BF16
    assert c.weight_bytes_per_gpu[1] == pytest.approx(dense_b + routed * 2 / 4)
    assert list(c.gpus) == [1, 4]
    gib = 2**30
    free = 192 * gib * p.memory_usable_fraction - c.weight_bytes_per_gpu[1] - p.workspace_gb_per_gpu * gib
    assert c.kv_capacity_tokens[1] == pytest.approx(4 * free / 131072)
    parts = decode_parts(c, 256.0, 1000.0)
    assert parts.comm_s[0] == 0.0 and parts.comm_s[1] > 0.0
    assert c.keys[1].endswith("__ep4")


def test_dense_model_refuses_expert_parallelism():
    from catalog.errors import ModelError

    with pytest.raises(ModelError, match="dense model"):
        build_configs(dense(), [(device(), BF16, 1, 1)], CalibrationParams(), ep=2)


def test_sliding_window_reads_and_caches_less():
    """gpt-oss-120b: 18 of 36 layers keep 128 tokens; at context 8192 a sequence attends to
    (18·8192 + 18·128)/36 = 4160 tokens: decode attention at batch 1 costs 4160/8192 of full."""
    m = CAT.model("gpt-oss-120b")
    full = m.model_copy(update={"sliding_window_tokens": None, "sliding_window_layers": None})
    d = CAT.device("b200")
    p = CalibrationParams(**ZERO_HOST)
    cw = build_configs(m, [(d, CAT.precision("mxfp4"), 1, 1)], p)
    cf = build_configs(full, [(d, CAT.precision("mxfp4"), 1, 1)], p)
    ratio = decode_parts(cw, 1.0, 8192.0).attn_s[0] / decode_parts(cf, 1.0, 8192.0).attn_s[0]
    assert ratio == pytest.approx(4160 / 8192)
    assert offline_batch(cw, 1024, 8192)[0] > 1.9 * offline_batch(cf, 1024, 8192)[0]


def test_fidelity_classes_and_bands():
    """measured: device/engine in the fit; same-generation: its generation is; datasheet-only:
    neither. With leave-out bands in the params, each class takes its band widened to contain the
    better classes' (a device known less is never trusted more)."""
    p = CalibrationParams(
        coverage=Coverage(device_engines=["h100-sxm/trtllm"], generations=["hopper"], vendors=["nvidia"]),
        error_bands={"a": ErrorBand(low_factor=0.9, high_factor=1.1, n=10, basis="x"),
                     "b": ErrorBand(low_factor=0.8, high_factor=1.2, n=10, basis="y"),
                     "c": ErrorBand(low_factor=0.85, high_factor=1.5, n=10, basis="z")})
    h100, h200, mi300 = CAT.device("h100-sxm"), CAT.device("h200-sxm"), CAT.device("mi300x")
    assert fidelity_of(h100, p, CAT.devices).class_ == "measured"
    assert fidelity_of(h100, p, CAT.devices, engine="vllm").class_ == "same-generation"
    assert fidelity_of(h200, p, CAT.devices).class_ == "same-generation"
    f = fidelity_of(mi300, p, CAT.devices)
    assert (f.class_, f.low_factor, f.high_factor) == ("datasheet-only", 0.8, 1.5)  # low widened to b's


def test_workload_engine_reaches_the_candidates():
    """A workload's ``engine`` builds every candidate with it: keys carry ``__vllm`` on NVIDIA
    devices (whose default is trtllm) and the capacities differ from the default engine's when the
    vllm factors differ."""
    from optimizer.planning.candidates import model_candidates
    from workloads import parse_plan, resolve_catalog

    base = {"name": "e", "objective": "tco", "allowed_devices": ["h100-sxm"],
            "workloads": [{"name": "w", "model": "llama-3.1-8b", "qps": 5, "prompt_tokens": 512,
                           "output_tokens": 128, "slo": {"ttft_p99_ms": 2000}, "precisions": ["fp8"]}]}
    p = CalibrationParams(overrides=[FactorOverride(engine="vllm", memory_bandwidth_efficiency=0.3)])
    keys, caps = [], []
    for engine in (None, "vllm"):
        data = {**base, "workloads": [{**base["workloads"][0], **({"engine": engine} if engine else {})}]}
        plan = parse_plan(data, "test")
        cset = model_candidates(plan, resolve_catalog(plan, CAT, "test"), p)
        kept = cset.workload("w").kept
        keys.append({c.key for c in kept})
        caps.append(max(c.capacity_qps[0] for c in kept))
    assert all(not k.endswith("__vllm") for k in keys[0]) and keys[1] and all(k.endswith("__vllm") for k in keys[1])
    assert caps[1] < caps[0]


def test_mla_attention_flops_absorbed_in_decode_per_head_in_prefill():
    """DeepSeek-R1 (61 layers, 128 heads, head_dim 128, rope 64, latent 512): decode attends the
    latent absorbed, 2·61·128·(2·512 + 64) = 16,990,208 FLOP per context token; prefill runs per
    head, 2·61·128·(2·128 + 64) = 4,997,120; a GQA model is 4·layers·heads·head_dim in both."""
    r1 = CAT.model("deepseek-r1")
    assert decode_attention_flops_per_context_token(r1) == 16_990_208
    assert attention_flops_per_context_token(r1) == 4_997_120
    m = dense()
    assert decode_attention_flops_per_context_token(m) == attention_flops_per_context_token(m) == 4 * 32 * 32 * 128


def test_prefill_attention_has_its_own_efficiency():
    """Halving prefill_attention_efficiency doubles the prefill attention part only: the decode
    step without prefill tokens is unchanged; None falls back to attention_efficiency."""
    base = dict(attention_efficiency=0.4, **ZERO_HOST)
    c = build_configs(dense(), [(device(), BF16, 1, 1)] * 3, CalibrationParams(**base))
    c2 = build_configs(dense(), [(device(), BF16, 1, 1)] * 3, CalibrationParams(prefill_attention_efficiency=0.2, **base))
    assert c.prefill_attention_efficiency == 0.4
    one, two = decode_parts(c, 64, 2048.0, 4096.0, 1024.0), decode_parts(c2, 64, 2048.0, 4096.0, 1024.0)
    assert two.prefill_attn_s[0] == pytest.approx(2 * one.prefill_attn_s[0], rel=1e-12)
    assert two.attn_s[0] == one.attn_s[0] and two.gemm_s[0] == one.gemm_s[0]
    # prefill attention = 4·32·32·128 FLOP · 4096 tokens · span 1024 / (1000e12 · 0.4)
    assert one.prefill_attn_s[0] == pytest.approx(4 * 32 * 32 * 128 * 4096 * 1024 / (1000e12 * 0.4), rel=1e-9)


def test_weight_only_override_selects_w4a16_gemms():
    """int4 (AWQ/GPTQ, W4A16) computes in BF16 like bf16, but a weight_only=True override reaches
    its GEMMs alone: at batch 8192 (compute-bound) the int4 step is 0.6/0.3 = 2x the bf16 one
    (GEMM FLOPs identical: the weights are dequantized to 16 bit, same MMA)."""
    int4 = CAT.precision("int4")
    assert int4.compute_dtype == "bf16" and int4.weight_only
    p = CalibrationParams(compute_efficiency=0.6, overrides=[FactorOverride(weight_only=True, compute_efficiency=0.3)],
                          **ZERO_HOST)
    c = build_configs(dense(), [(device(), BF16, 1, 1), (device(), int4, 1, 1)], p)
    assert list(c.compute_efficiency) == [0.6, 0.3]
    parts = decode_parts(c, np.array([8192.0, 8192.0]), 0.0)
    assert parts.gemm_s[1] / parts.gemm_s[0] == pytest.approx(2.0, rel=0.02)
    assert FactorOverride(weight_only=True).selector == "weight_only=True"


def test_host_link_has_its_own_efficiency():
    """A tp2 group on a device with a 1-GPU domain all-reduces over PCIe at pcie_gb_s/2 ·
    pcie_link_efficiency (64/2 GB/s · 0.25 = 8 GB/s); inside an NVLink domain at
    interconnect_gb_s/2 · link_efficiency (1000/2 · 0.7 = 350 GB/s)."""
    p = CalibrationParams(link_efficiency=0.7, pcie_link_efficiency=0.25)
    c = build_configs(dense(), [(device("pcie", interconnect_domain_gpus=1), BF16, 2, 1), (device(), BF16, 2, 1)], p)
    assert list(c.link_bytes_s) == pytest.approx([8e9, 350e9])
    assert build_configs(dense(), [(device("pcie", interconnect_domain_gpus=1), BF16, 2, 1)],
                         CalibrationParams(link_efficiency=0.7)).link_bytes_s[0] == pytest.approx(22.4e9)
