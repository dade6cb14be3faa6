"""The 2026 models of the catalog (gpt-oss, Qwen3, Llama 4, DeepSeek-R1, Kimi-K2, Gemma 3,
Mistral Small 3.1, Llama 3.2) are estimable on a device they fit."""

from __future__ import annotations

import json

import pytest

from catalog import load_catalog

CAT = load_catalog()

NEW_MODELS = ("gpt-oss-120b gpt-oss-20b qwen3-235b-a22b qwen3-30b-a3b qwen3-32b qwen3-8b llama-4-maverick "
              "llama-4-scout deepseek-r1 kimi-k2 gemma-3-27b mistral-small-3.1-24b llama-3.2-3b llama-3.2-1b").split()


@pytest.mark.parametrize("model", NEW_MODELS)
def test_new_models_estimate_on_blackwell(run_cli, model):
    """Every 2026 model fits 8 × B200 in NVFP4 (Kimi-K2: 1026B · 0.5625 B ≈ 577 GB of 1,440 GB) and the
    model predicts a positive throughput at batch 8; the JSON reports the full-context KV bytes/token
    in FP8 (half the models.csv BF16 column)."""
    r = run_cli("estimate", "--model", model, "--device", "b200", "--precision", "nvfp4", "--tp", "8",
                "--input-tokens", "1024", "--output-tokens", "256", "--batch", "8", "--json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["fits"] is True
    assert out["output_tokens_per_s"] > 0
    assert out["kv_cache_bytes_per_token"] == CAT.model(model).kv_bytes_per_token(1)
