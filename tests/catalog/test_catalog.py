"""The built-in catalog: every device, model and precision the issues name, with sources."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest

from catalog import load_catalog
from catalog.errors import CatalogError
from catalog.load import model_from_hf_config
from tests.conftest import REFERENCE

DEVICE_KEYS = (
    "a100-40gb-sxm a100-80gb-sxm a100-80gb-pcie h100-sxm h100-pcie h100-nvl h200-sxm h20 b200 b300 "
    "gb200 l40s l4 a10g a10 t4 rtx-4090 rtx-6000-ada rtx-pro-6000 mi250x mi300x mi325x mi355x gaudi2 "
    "gaudi3 tpu-v5e tpu-v6e gb300"
).split()
MODEL_KEYS = ("llama-3.1-8b llama-3.1-70b llama-3.1-405b llama-2-7b llama-2-70b mixtral-8x7b "
              "mistral-7b qwen2.5-72b deepseek-v3 gpt-oss-120b gpt-oss-20b qwen3-235b-a22b qwen3-30b-a3b "
              "qwen3-32b qwen3-8b llama-4-maverick llama-4-scout deepseek-r1 kimi-k2 gemma-3-27b "
              "mistral-small-3.1-24b llama-3.2-3b llama-3.2-1b").split()
ALIASES = {"llama-3-8b": "llama-3.1-8b", "llama-3-70b": "llama-3.1-70b", "llama-3.3-70b": "llama-3.1-70b",
           "deepseek-ai/DeepSeek-R1-0528": "deepseek-r1", "deepseek-ai/DeepSeek-V3-0324": "deepseek-v3"}


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_all_devices_present_with_sources(cat):
    assert sorted(cat.devices) == sorted(DEVICE_KEYS)
    for d in cat.devices.values():
        assert d.sources["specs"].source and d.sources["specs"].as_of
        for field in ("purchase_usd", "cloud_usd_per_gpu_hour"):
            if getattr(d, field) is not None:
                assert field in d.sources or field in d.estimated, (d.key, field)


def test_device_figures_match_reference_csv(cat):
    """Memory, bandwidth, dense BF16/FP16 and TDP equal gpus.csv wherever the CSV has them."""
    with open(REFERENCE / "gpus.csv", newline="") as fh:
        by_key = {r["gpu_key"].lower(): r for r in csv.DictReader(fh)}
    names = {"rtx-pro-6000": "rtx-pro-6000-blackwell"}
    for d in cat.devices.values():
        row = by_key[names.get(d.key, d.key)]
        assert d.memory_gb == float(row["memory_gb"])
        assert d.memory_bandwidth_tb_s == float(row["mem_bw_tbps"])
        for field, col in (("bf16_tflops", "bf16_dense_tflops"), ("fp8_tflops", "fp8_dense_tflops"),
                           ("fp4_tflops", "fp4_dense_tflops"), ("tdp_w", "tdp_w")):
            if row[col]:
                assert getattr(d, field) == float(row[col]), (d.key, field)
            elif getattr(d, field) is not None:
                assert field in d.estimated, f"{d.key}.{field} has a value the reference lacks but no estimate basis"


def test_h100_dense_not_sparse(cat):
    # gpus.csv: H100 SXM datasheet 1,979 BF16 is the sparse headline; dense is 989.
    assert cat.device("h100-sxm").bf16_tflops == 989
    assert cat.device("h100-sxm").ridge_flop_per_byte == pytest.approx(989 / 3.35, rel=1e-9)


@pytest.mark.parametrize("key", MODEL_KEYS)
def test_models_resolve(cat, key):
    m = cat.model(key)
    assert m.key == key
    assert cat.model(m.hf_id).key == key


@pytest.mark.parametrize("alias,key", ALIASES.items())
def test_model_aliases(cat, alias, key):
    assert cat.model(alias).key == key


def _models_csv() -> list[dict[str, str]]:
    with open(REFERENCE / "models.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_models_csv_row_is_in_the_catalog(cat):
    rows = _models_csv()
    assert len(rows) == 23
    assert sorted(cat.model(r["hf_repo"]).key for r in rows) == sorted(MODEL_KEYS)


def test_kv_bytes_per_token_match_models_csv(cat):
    """models.csv column kv_cache_bytes_per_token_bf16 = 2 · layers · kv_heads · head_dim · 2 (MLA: latent),
    the full-context figure also for windowed models (gpt-oss-120b: 2·36·8·64·2 = 73,728)."""
    for row in _models_csv():
        m = cat.model(row["hf_repo"])
        assert m.kv_bytes_per_token(2) == pytest.approx(int(row["kv_cache_bytes_per_token_bf16"]), rel=0.01), m.key


@pytest.mark.parametrize("row", _models_csv(), ids=lambda r: r["model"])
def test_params_from_architecture_match_published_total(cat, row):
    """Parameters computed from the shapes (+ the vision tower where there is one) are within 3 % of
    the published total (norms and biases are not in the shapes; Kimi-K2 +2.6 % against '1T'), and
    the active count within 3 % whether the card counts the input embedding or not (gpt-oss does not)."""
    m = cat.model(row["hf_repo"])
    counts = m.architecture_params()
    assert (counts.total / 1e9 + m.vision_params_b) == pytest.approx(float(row["total_params_b"]), rel=0.03)
    published_active = float(row["active_params_b"])
    with_embedding = counts.active / 1e9
    without_input_embedding = (counts.active - m.vocab_size * m.hidden_size) / 1e9
    assert min(abs(with_embedding / published_active - 1), abs(without_input_embedding / published_active - 1)) < 0.03


def test_sliding_window_kv_tokens(cat):
    """gpt-oss-120b (models.csv notes): KV(n) = 36864·n + 36864·min(n, 128) bytes in BF16, i.e.
    at n = 8192: 36864 · (8192 + 128) = 306,708,480 B, versus 73728 · 8192 without the window."""
    m = cat.model("gpt-oss-120b")
    assert m.windowed_layers == 18
    assert m.kv_bytes_per_sequence(8192, 2) == 36864 * (8192 + 128)
    assert m.kv_bytes_per_sequence(100, 2) == 73728 * 100  # inside the window every layer holds all
    gemma = cat.model("gemma-3-27b")  # KV(n) = 81920·n + 425984·min(n, 1024)
    assert gemma.kv_bytes_per_sequence(4096, 2) == pytest.approx(81920 * 4096 + 425984 * 1024)
    scout = cat.model("llama-4-scout")  # chunked: KV(n) <= 49152·n + 147456·min(n, 8192)
    assert scout.sliding_window_kind == "chunked"
    assert scout.kv_bytes_per_sequence(100_000, 2) == pytest.approx(49152 * 100_000 + 147456 * 8192)
    assert cat.model("mistral-7b").effective_kv_tokens(32768) == 4096  # every layer windowed
    assert cat.model("llama-3.1-8b").effective_kv_tokens(32768) == 32768
    arr = m.effective_kv_tokens(np.array([64.0, 8192.0]))  # vectorised
    assert arr.tolist() == [64.0, (8192 + 128) / 2]


def test_moe_active_params_consistent(cat):
    """Dense part + experts_per_token experts reproduces the published active count within 3 %
    (gpt-oss: after the input embedding, which its card leaves out of the active count; Kimi-K2 +2.7 %)."""
    for m in cat.models.values():
        if not m.is_moe:
            continue
        active = m.dense_params + m.experts_per_token * m.params_per_expert
        if m.key.startswith("gpt-oss"):
            active -= m.vocab_size * m.hidden_size
        assert active / 1e9 == pytest.approx(m.active_params_b, rel=0.03), m.key


def test_precisions(cat):
    assert sorted(cat.precisions) == sorted(["bf16", "fp16", "fp8", "int8", "int4", "fp4", "nvfp4", "mxfp4"])
    assert cat.precision("int4").weight_only
    assert cat.precision("fp8").unsupported_reason(cat.device("a100-80gb-sxm")) is not None
    assert cat.precision("fp8").unsupported_reason(cat.device("h100-sxm")) is None
    assert cat.precision("int4").unsupported_reason(cat.device("t4")) is None  # fp16 compute
    assert cat.precision("bf16").unsupported_reason(cat.device("t4")) is not None
    assert cat.precision("fp4").unsupported_reason(cat.device("b200")) is None
    assert cat.precision("fp4").unsupported_reason(cat.device("h100-sxm")) is not None


@pytest.mark.parametrize("key,bits", [
    ("nvfp4", 4 + 8 / 16),  # NVIDIA: E2M1 + one E4M3 scale per 16 values
    ("mxfp4", 4 + 8 / 32),  # OCP MX v1.0: E2M1 + one E8M0 scale per 32
    ("fp4", 4.5),  # counted in the NVFP4 layout
    ("int4", 4 + (16 + 4) / 128),  # AWQ group 128: fp16 scale + 4-bit zero
    ("fp8", 8), ("bf16", 16),
])
def test_storage_bits_per_weight(cat, key, bits):
    assert cat.precision(key).weight_bits_per_param == pytest.approx(bits, abs=1e-12)


def test_fp4_formats_keep_embedding_bf16_and_attention_fp8(cat):
    """Embedding and LM head in BF16, attention math in FP8: gpt-oss-120b in nvfp4 =
    (116.83e9 − 2·201088·2880) · 0.5625 + 2·201088·2880 · 2 bytes."""
    q = cat.precision("nvfp4")
    assert q.attention_dtype == "fp8" and q.embedding_bytes_per_param == 2
    m = cat.model("gpt-oss-120b")
    embed = 2 * 201088 * 2880
    assert q.model_weight_bytes(m) == pytest.approx((116.83e9 - embed) * 0.5625 + embed * 2)
    assert q.attention_peak_tflops(cat.device("b200")) == cat.device("b200").fp8_tflops
    assert cat.precision("int8").attention_peak_tflops(cat.device("a100-80gb-sxm")) == 312


def test_fp4_native_support(cat):
    """NVFP4 only on NVIDIA Blackwell; MXFP4 on Blackwell and MI355X (CDNA 4); neither on Hopper."""
    runs = {k: {d for d in cat.devices if cat.precision(k).unsupported_reason(cat.device(d)) is None}
            for k in ("nvfp4", "mxfp4")}
    assert runs["nvfp4"] == {"b200", "b300", "gb200", "gb300", "rtx-pro-6000"}
    assert runs["mxfp4"] == runs["nvfp4"] | {"mi355x"}
    assert "only nvidia" in cat.precision("nvfp4").unsupported_reason(cat.device("mi355x"))


def test_gb300_per_gpu_figures(cat):
    """gpus.csv GB300 row (verda.com per-GPU table, without sparsity): 279 GB, 8 TB/s, 2.5/5/15 PF."""
    d = cat.device("gb300")
    assert (d.memory_gb, d.memory_bandwidth_tb_s, d.bf16_tflops, d.fp8_tflops, d.fp4_tflops, d.tdp_w) == (
        279, 8.0, 2500, 5000, 15000, 1400)
    assert d.interconnect_domain_gpus == 72
    assert d.ranges["purchase_usd"] == (41700, 55600)


def test_unknown_names_suggest(cat):
    with pytest.raises(CatalogError, match="did you mean 'h100-sxm'"):
        cat.device("h100-sxn")
    with pytest.raises(CatalogError, match="llama-3.1-70b"):
        cat.model("llama-3.1-70")


def test_override_file(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("devices:\n  - key: h100-sxm\n    purchase_usd: 21000\n    estimated: {purchase_usd: negotiated quote}\n")
    cat = load_catalog(f)
    assert cat.device("h100-sxm").purchase_usd == 21000
    assert cat.device("h100-sxm").memory_gb == 80


def test_override_typo_is_named(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("devices:\n  - key: h100-sxm\n    memory_bandwith_tb_s: 4\n")
    with pytest.raises(CatalogError, match=r"memory_bandwith_tb_s: unknown field \(did you mean 'memory_bandwidth_tb_s'"):
        load_catalog(f)


def test_override_negative(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("devices:\n  - key: h100-sxm\n    memory_gb: -80\n")
    with pytest.raises(CatalogError, match=r"devices\[0\]\.memory_gb: input should be greater than 0 \(got -80\)"):
        load_catalog(f)


HF_CONFIGS = {
    "dense-gqa": ({"num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
                   "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256,
                   "max_position_embeddings": 131072, "_name_or_path": "meta-llama/Llama-3.1-70B"},
                  70.6, 70.6, 327680),
    "moe": ({"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
             "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
             "max_position_embeddings": 32768}, 46.7, 12.9, 131072),
    "mla": ({"num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
             "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
             "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "kv_lora_rank": 512,
             "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
             "vocab_size": 129280, "max_position_embeddings": 163840}, 671.0, 37.0, 70272),
}


@pytest.mark.parametrize("name", HF_CONFIGS)
def test_model_from_hf_config(tmp_path, name):
    """Parameter counts from config shapes agree with the published totals (models.csv) within 2 %."""
    cfg, total_b, active_b, kv_bf16 = HF_CONFIGS[name]
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    m = model_from_hf_config(f, key=name)
    assert m.total_params_b == pytest.approx(total_b, rel=0.02)
    assert m.active_params_b == pytest.approx(active_b, rel=0.03)
    assert m.kv_bytes_per_token(2) == kv_bf16


# Invalid model entries: one valid override (a gpt-oss-20b copy) changed by one field each.
BAD_MODELS = {
    "moe-layers-above-layers": ({"moe_layers": 25}, "moe_layers 25 exceeds num_layers 24"),
    "window-layers-above-layers": ({"sliding_window_layers": 30}, "sliding_window_layers 30 exceeds num_layers 24"),
    "window-above-context": ({"sliding_window_tokens": 200000}, "sliding_window_tokens 200000 exceeds max_context"),
    "window-layers-without-window": ({"sliding_window_tokens": None}, "sliding_window_layers 12 needs sliding_window_tokens"),
    "dense-with-expert-fields": ({"num_experts": 0, "experts_per_token": 0}, "need num_experts > 0"),
    "mla-rank-without-latent": ({"q_lora_rank": 1536}, "describe MLA"),
    "vision-above-total": ({"vision_params_b": 30.0}, "vision_params_b 30.0 must be below total_params_b"),
}


@pytest.mark.parametrize("name", BAD_MODELS)
def test_invalid_model_entry_is_named(tmp_path, name):
    change, message = BAD_MODELS[name]
    base = load_catalog().model("gpt-oss-20b").model_dump(mode="json")
    entry = {**base, "key": "my-model", "hf_id": "me/my-model", "aliases": [], **change}
    f = tmp_path / "mine.yaml"
    f.write_text(json.dumps({"models": [entry]}))
    with pytest.raises(CatalogError, match=re.escape(message)):
        load_catalog(f)


def test_hf_config_sliding_window_from_layer_types(tmp_path):
    """gpt-oss-20b config shapes (models.csv): layer_types alternate sliding/full -> 12 windowed layers of
    128; a Qwen3-style disabled window (use_sliding_window false) is no window."""
    cfg = {"num_hidden_layers": 24, "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
           "head_dim": 64, "intermediate_size": 2880, "vocab_size": 201088, "num_local_experts": 32,
           "num_experts_per_tok": 4, "sliding_window": 128, "max_position_embeddings": 131072,
           "layer_types": ["sliding_attention", "full_attention"] * 12}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    m = model_from_hf_config(f, key="oss")
    assert (m.sliding_window_tokens, m.windowed_layers) == (128, 12)
    assert m.total_params_b == pytest.approx(20.91, rel=0.01)
    assert m.kv_bytes_per_token(2) == 49152
    f.write_text(json.dumps({**cfg, "use_sliding_window": False}))
    assert model_from_hf_config(f, key="oss").sliding_window_tokens is None


def test_hf_config_shared_experts_llama4_and_experts_only_quantization(tmp_path):
    """What a config.json says beyond n_shared_experts, checked against the catalog's hand-entered copies.

    Qwen1.5-MoE-A2.7B: one shared expert of width shared_expert_intermediate_size 5632 = 4 routed widths (1408), held
    and read every step: dense params = embeddings 2·151936·2048 + 24 · (attention 4·2048² + router 60·2048 + shared
    3·2048·5632) = 1.8593e9 (it was 1.0289e9: the shared expert was dropped from the weights and the step's reads).
    Llama-4-Maverick's text_config: experts of intermediate_size 8192, dense layers of intermediate_size_mlp 16384,
    one shared expert, chunked attention of 8192 on the 36 RoPE layers: the catalog entry's dense params and window
    (it was read as 8192-wide dense layers and no shared expert, active 11.1B instead of 17B, and no window).
    gpt-oss: quantization_config.modules_to_not_convert keeps self_attn in BF16: unquantized_dense."""
    qwen = {"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
            "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
            "num_experts": 60, "num_experts_per_tok": 4, "vocab_size": 151936, "max_position_embeddings": 8192}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(qwen))
    m = model_from_hf_config(f, key="qwen-moe")
    assert m.shared_experts == 4
    assert m.dense_params == 2 * 151936 * 2048 + 24 * (4 * 2048**2 + 60 * 2048 + 3 * 2048 * 5632)
    assert m.total_params_b == pytest.approx(14.32, abs=0.01)  # Qwen1.5-MoE-A2.7B's model card: 14.3B
    assert m.active_params_b == pytest.approx(2.69, abs=0.01)  # and 2.7B activated
    ref = load_catalog().model("llama-4-maverick")
    text = {"model_type": "llama4_text", "num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
            "vocab_size": 202048, "max_position_embeddings": 1048576, "attention_chunk_size": 8192}
    f.write_text(json.dumps({"text_config": text}))
    m = model_from_hf_config(f, key="maverick")
    assert (m.intermediate_size, m.moe_intermediate_size, m.moe_layers, m.shared_experts) == (16384, 8192, 24, 1)
    assert m.dense_params == ref.dense_params and m.routed_expert_params == ref.routed_expert_params
    assert (m.sliding_window_tokens, m.windowed_layers, m.sliding_window_kind) == (8192, 36, "chunked")
    assert m.active_params_b == pytest.approx(17.0, rel=0.02)
    oss = {"num_hidden_layers": 24, "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
           "head_dim": 64, "intermediate_size": 2880, "vocab_size": 201088, "num_local_experts": 32,
           "experts_per_token": 4, "max_position_embeddings": 131072,
           "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
               "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
    f.write_text(json.dumps(oss))
    m = model_from_hf_config(f, key="oss")
    assert m.unquantized_dense and m.experts_per_token == 4
    assert m.dense_params == load_catalog().model("gpt-oss-20b").dense_params

def test_every_shipped_device_is_far_below_the_unit_slip_ceilings():
    """The ceilings catch unit slips (GB/s typed as TB/s), never a real device: every shipped figure is at
    least 5x below its ceiling (the ceilings are ~10x the 2026 maxima)."""
    from catalog.schema import DEVICE_CEILINGS

    cat = load_catalog()
    for field, (ceiling, _) in DEVICE_CEILINGS.items():
        values = [getattr(d, field) for d in cat.devices.values() if getattr(d, field) is not None]
        assert values and max(values) * 5 <= ceiling, field


def test_a_figure_in_the_wrong_unit_is_refused_with_the_unit():
    from catalog.schema import Device

    d = load_catalog().devices["h100-sxm"].model_dump()
    d["fp8_tflops"] = 1_979_000.0  # TFLOPS typed as GFLOPS
    with pytest.raises(ValueError, match=r"fp8_tflops 1,979,000 is above 200,000.*dense TFLOPS"):
        Device.model_validate(d)
    d["fp8_tflops"] = 1e308  # a figure far beyond the ceiling is written in powers of ten, not in 309 digits
    with pytest.raises(ValueError, match=r"fp8_tflops 1e\+308 is above 200,000"):
        Device.model_validate(d)
    d["fp8_tflops"] = 1_979.0
    d["purchase_usd"] = 300_000.0  # a whole 8-GPU server's price is still under the per-device ceiling
    assert Device.model_validate(d).purchase_usd == 300_000.0


def test_a_figure_for_a_message_is_whole_with_separators_or_a_power_of_ten_either_sign():
    # catalog.errors.figure: the one number format of messages (a hand-edited objective of -5, a capex of 1.7e308)
    from catalog.errors import figure

    assert [figure(v) for v in (3.35, 85_000_000, 1.7e308)] == ["3.35", "85,000,000", "1.7e+308"]
    assert [figure(v) for v in (-5, -709_375.4, -1e300)] == ["-5", "-709,375", "-1e+300"]
