"""Constants the models share, defined once (Z99 is shared with workloads/: defined in catalog.constants)."""

from catalog.constants import Z99  # noqa: F401 (the models import it from here)

DEFAULT_PREFILL_CHUNK_TOKENS = 2048  # token budget a step spends on waiting prompts (vLLM/TensorRT-LLM default)
SHIPPED_ONLINE_WEIGHT = 1.0  # online_weight of the shipped optimizer/models/data/calibration.yaml fit
