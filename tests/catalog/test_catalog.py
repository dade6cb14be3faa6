"""The built-in catalog: every device, model and precision the issues name, with sources."""

from __future__ import annotations

import csv
import json

import pytest

from catalog import load_catalog
from catalog.errors import CatalogError
from catalog.load import model_from_hf_config
from tests.conftest import REFERENCE

DEVICE_KEYS = (
    "a100-40gb-sxm a100-80gb-sxm a100-80gb-pcie h100-sxm h100-pcie h100-nvl h200-sxm h20 b200 b300 "
    "gb200 l40s l4 a10g a10 t4 rtx-4090 rtx-6000-ada rtx-pro-6000 mi250x mi300x mi325x mi355x gaudi2 "
    "gaudi3 tpu-v5e tpu-v6e"
).split()
MODEL_KEYS = ("llama-3.1-8b llama-3.1-70b llama-3.1-405b llama-2-7b llama-2-70b mixtral-8x7b "
              "mistral-7b qwen2.5-72b deepseek-v3").split()
ALIASES = {"llama-3-8b": "llama-3.1-8b", "llama-3-70b": "llama-3.1-70b", "llama-3.3-70b": "llama-3.1-70b",
           "deepseek-r1": "deepseek-v3"}


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


def test_kv_bytes_per_token_match_models_csv(cat):
    """models.csv column kv_cache_bytes_per_token_bf16 = 2 · layers · kv_heads · head_dim · 2 (MLA: latent)."""
    with open(REFERENCE / "models.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        m = cat.model(row["hf_repo"])
        assert m.kv_bytes_per_token(2) == int(row["kv_cache_bytes_per_token_bf16"]), m.key


def test_moe_active_params_consistent(cat):
    """Dense part + experts_per_token experts reproduces the published active count within 2 %."""
    for key in ("mixtral-8x7b", "deepseek-v3"):
        m = cat.model(key)
        active = m.dense_params + m.experts_per_token * m.params_per_expert
        assert active / 1e9 == pytest.approx(m.active_params_b, rel=0.02)


def test_precisions(cat):
    assert sorted(cat.precisions) == sorted(["bf16", "fp16", "fp8", "int8", "int4", "fp4"])
    assert cat.precision("int4").weight_only and cat.precision("int4").weight_bytes_per_param == 0.5
    assert cat.precision("fp8").unsupported_reason(cat.device("a100-80gb-sxm")) is not None
    assert cat.precision("fp8").unsupported_reason(cat.device("h100-sxm")) is None
    assert cat.precision("int4").unsupported_reason(cat.device("t4")) is None  # fp16 compute
    assert cat.precision("bf16").unsupported_reason(cat.device("t4")) is not None
    assert cat.precision("fp4").unsupported_reason(cat.device("b200")) is None
    assert cat.precision("fp4").unsupported_reason(cat.device("h100-sxm")) is not None


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
