"""Constants the models share, defined once."""

DEFAULT_PREFILL_CHUNK_TOKENS = 2048  # token budget a step spends on waiting prompts (vLLM/TensorRT-LLM default)
SHIPPED_ONLINE_WEIGHT = 1.0  # online_weight of the shipped optimizer/models/data/calibration.yaml fit
Z99 = 2.326347874  # z of the standard normal's 99th percentile: Φ⁻¹(0.99)
