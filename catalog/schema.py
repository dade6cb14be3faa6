"""Strict pydantic models of the catalog: devices, models, precisions.

Every quantity carries its unit in its name. Every device figure names its source and
as-of date; figures not published are either absent (the device cannot do what needs
them, e.g. no ``fp8_tflops`` = no native FP8) or estimated with a stated basis.
"""

from __future__ import annotations

import math
import types
from functools import cache
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, model_validator

from catalog.architecture import ParamCounts, attention_params, parameter_counts
from catalog.constants import MAX_SERVER_POWER_W, MAX_SERVER_USD
from catalog.errors import figure as _figure

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]

ComputeDtype = Literal["bf16", "fp16", "fp8", "int8", "fp4"]
Vendor = Literal["nvidia", "amd", "intel", "google", "other"]
InterconnectKind = Literal["nvlink", "infinity-fabric", "pcie", "ici", "ethernet"]

# Device fields that hold the dense tensor peak of each compute dtype.
PEAK_FIELD_BY_DTYPE: dict[str, str] = {
    "bf16": "bf16_tflops",
    "fp16": "fp16_tflops",
    "fp8": "fp8_tflops",
    "int8": "int8_tops",
    "fp4": "fp4_tflops",
}


def _elementwise_min(a, b):
    """min(a, b) for numbers and numpy arrays alike, without importing numpy: (a + b − |a − b|) / 2."""
    return (a + b - abs(a - b)) / 2


def _admits_bool(annotation: Any) -> bool:
    """True when a field of this type may hold true/false (bool, a union with bool, a Literal of booleans, Any)."""
    if annotation is bool or annotation is Any or annotation is object:
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _admits_bool(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return any(_admits_bool(a) for a in get_args(annotation))
    if origin is Literal:
        return any(isinstance(a, bool) for a in get_args(annotation))
    return False


@cache
def _yes_no_fields(cls: type[BaseModel]) -> frozenset[str]:
    """The fields of ``cls`` that hold no true/false value."""
    return frozenset(name for name, f in cls.model_fields.items() if not _admits_bool(f.annotation))


class Strict(BaseModel):
    """extra="forbid", frozen, and no true/false where a number or a name is due: pydantic would read
    ``qps: true`` (YAML ``yes``, ``on``) as 1 req/s and ``min_replicas: on`` as 1."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _no_yes_no_numbers(cls, data):
        if isinstance(data, dict):
            for name in _yes_no_fields(cls):
                value = data.get(name)
                if isinstance(value, bool):
                    raise ValueError(f"{name}: {str(value).lower()} is a yes/no value, not a number or a name; "
                                     f"write the {name} itself")
        return data


class Source(Strict):
    """Where a figure comes from and when it was true."""

    source: str = Field(min_length=1)
    as_of: str = Field(min_length=4, description="date or year the source describes, e.g. 2024-06")


SOURCED_FIELDS = ("purchase_usd", "cloud_usd_per_gpu_hour", "scaleout_nic_gbps_per_gpu")  # need a source or basis

# Ceilings of one accelerator's figures, each about 10x the largest shipped in 2026 (MI355X: 288 GB,
# 8 TB/s, 1,400 W; GB300: 15,000 dense FP4 TFLOPS, 1,800 GB/s NVLink, a 72-GPU NVLink domain; B300:
# $50,000). A figure above one is a unit slip (GB/s typed as TB/s, sparse x1000, a server's price for
# one GPU's) that would otherwise plan a fleet on a device that cannot exist, silently.
# field -> (ceiling, what the field's unit is, with a real value to compare)
DEVICE_CEILINGS: dict[str, tuple[float, str]] = {
    "memory_gb": (4096, "GB per device (an H100 SXM has 80)"),
    "memory_bandwidth_tb_s": (100, "TB/s (an H100 SXM has 3.35)"),
    "bf16_tflops": (200_000, "dense TFLOPS (an H100 SXM has 989 BF16)"),
    "fp16_tflops": (200_000, "dense TFLOPS (an H100 SXM has 989 FP16)"),
    "fp8_tflops": (200_000, "dense TFLOPS (an H100 SXM has 1,979 FP8)"),
    "int8_tops": (200_000, "dense TOPS (an H100 SXM has 1,979 INT8)"),
    "fp4_tflops": (200_000, "dense TFLOPS (a B200 has 9,000 FP4)"),
    "tdp_w": (20_000, "watts per device (an H100 SXM is 700)"),
    "interconnect_gb_s": (20_000, "GB/s per GPU (an H100 SXM's NVLink is 900)"),
    "interconnect_domain_gpus": (1_024, "GPUs sharing one scale-up domain (an HGX board is 8, a GB200 NVL72 rack 72)"),
    "pcie_gb_s": (2_000, "GB/s per GPU (PCIe Gen5 x16 is 128)"),
    "scaleout_nic_gbps_per_gpu": (20_000, "Gb/s per GPU (a ConnectX-7 is 400)"),
    "gpus_per_node": (1_024, "GPUs per server (an HGX server has 8)"),
    "purchase_usd": (2_000_000, "US$ per device, not per server (an H100 SXM is ~$25,000)"),
    "cloud_usd_per_gpu_hour": (1_000, "US$ per GPU-hour (an H100 rents for ~$2-4)"),
}

# Floors of the physical figures, each about 1/50 of the smallest shipped in 2026 (T4: 16 GB, 65 FP16 TFLOPS,
# 70 W, PCIe Gen3 32 GB/s; L4: 0.3 TB/s). Below one the figure is a slip (MB/s typed as TB/s, 1e-300) that
# would plan a device needing years per token, silently. Prices have no floor: a near-zero price is how a
# plan says the hardware is already paid for.
DEVICE_FLOORS: dict[str, float] = {
    "memory_gb": 0.25,
    "memory_bandwidth_tb_s": 0.005,
    "bf16_tflops": 1.0,
    "fp16_tflops": 1.0,
    "fp8_tflops": 1.0,
    "int8_tops": 1.0,
    "fp4_tflops": 1.0,
    "tdp_w": 1.0,
    "interconnect_gb_s": 0.5,
    "pcie_gb_s": 0.5,
    "scaleout_nic_gbps_per_gpu": 1.0,
}


class Device(Strict):
    """One accelerator as its datasheet describes it (dense, not sparse, peaks)."""

    key: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    name: str
    vendor: Vendor
    generation: str = Field(description="architecture family used to group calibration factors")
    memory_type: Literal["hbm", "gddr", "lpddr"]
    memory_gb: PositiveFloat
    memory_bandwidth_tb_s: PositiveFloat
    bf16_tflops: PositiveFloat | None = None
    fp16_tflops: PositiveFloat | None = None
    fp8_tflops: PositiveFloat | None = None
    int8_tops: PositiveFloat | None = None
    fp4_tflops: PositiveFloat | None = None
    tdp_w: PositiveFloat | None = None
    interconnect_kind: InterconnectKind
    interconnect_gb_s: PositiveFloat = Field(
        description="scale-up bandwidth per GPU, bidirectional aggregate as vendors quote it"
    )
    interconnect_domain_gpus: PositiveInt = Field(
        description="GPUs that share the scale-up link (8 = NVSwitch board, 2 = bridged pair); "
        "tensor parallelism beyond it falls back to the host PCIe link"
    )
    pcie_gb_s: PositiveFloat = Field(description="host PCIe bandwidth, bidirectional")
    scaleout_nic_gbps_per_gpu: PositiveFloat | None = Field(
        None, description="scale-out (east-west RDMA) network per GPU in its server, Gb/s per direction; "
        "carries the KV cache between disaggregated prefill and decode pools (absent: no pools on this device)")
    gpus_per_node: PositiveInt
    purchase_usd: PositiveFloat | None = None
    cloud_usd_per_gpu_hour: PositiveFloat | None = None
    cloud_gpus_per_instance: PositiveInt | None = Field(
        None, description="under objective cloud, the smallest instance the cloud price rents: GPUs are rented in "
        "multiples of it (1 = one at a time); the server's GPUs or a power of two dividing them "
        "(catalog.schema.cloud_instance_problem). None = as the device is bought: a whole board or rack, else one card"
    )
    consumer: bool = Field(
        False, description="consumer card whose licence restricts datacenter use (e.g. GeForce EULA); "
        "planned only when a plan lists it in allowed_devices"
    )
    ranges: dict[str, tuple[float, float]] = Field(
        default_factory=dict, description="published low/high of a figure whose default is picked"
    )
    estimated: dict[str, str] = Field(
        default_factory=dict, description="figure -> basis of the estimate"
    )
    sources: dict[str, Source]
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> Device:
        if self.bf16_tflops is None and self.fp16_tflops is None:
            raise ValueError("needs bf16_tflops or fp16_tflops (the 16-bit tensor peak)")
        if "specs" not in self.sources:
            raise ValueError("sources needs a 'specs' entry")
        for field in SOURCED_FIELDS:
            if getattr(self, field) is not None and field not in self.sources and field not in self.estimated:
                raise ValueError(f"{field} needs a source (sources.{field}) or an estimate basis")
        for field, (ceiling, unit) in DEVICE_CEILINGS.items():
            value = getattr(self, field)
            if value is not None and value > ceiling:
                raise ValueError(f"{field} {_figure(value)} is above {_figure(ceiling)}, far beyond any accelerator "
                                 f"made: check the unit, {unit}")
        for field, floor in DEVICE_FLOORS.items():
            value = getattr(self, field)
            if value is not None and value < floor:
                raise ValueError(f"{field} {value:g} is below {floor:g}, far below any accelerator made: check the "
                                 f"unit, {DEVICE_CEILINGS[field][1]}")
        for field, (low, high) in self.ranges.items():
            if field not in DEVICE_CEILINGS:
                raise ValueError(f"ranges.{field}: not a figure of a device; use one of {', '.join(DEVICE_CEILINGS)}")
            if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= high):
                raise ValueError(f"ranges.{field}: low {low:g} must be > 0 and <= high {high:g}, both finite")
        return self

    def peak_tflops(self, dtype: str) -> float | None:
        """Dense tensor peak for a compute dtype, or None when the device has no native support."""
        return getattr(self, PEAK_FIELD_BY_DTYPE[dtype])

    @property
    def peak_16bit_tflops(self) -> float:
        """The 16-bit tensor peak used by weight-only formats: bf16, else fp16."""
        return self.bf16_tflops or self.fp16_tflops  # type: ignore[return-value]

    @property
    def ridge_flop_per_byte(self) -> float:
        """Dense 16-bit FLOPs per byte of memory bandwidth: above it, a kernel is compute-bound."""
        return self.peak_16bit_tflops * 1e12 / (self.memory_bandwidth_tb_s * 1e12)

    def unusable_for(self) -> list[str]:
        """What this device cannot be planned for, because a figure is missing."""
        missing = []
        if self.purchase_usd is None:
            missing.append("capex/tco (no purchase price)")
        if self.cloud_usd_per_gpu_hour is None:
            missing.append("cloud (no hourly price)")
        if self.tdp_w is None:
            missing.append("power cap/tco power (no TDP)")
        if self.consumer:
            missing.append("default plans (consumer card: list it in allowed_devices)")
        return missing


class Model(Strict):
    """Architecture of one LLM, as its Hugging Face config.json states it."""

    key: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    hf_id: str
    aliases: list[str] = Field(default_factory=list)
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    intermediate_size: PositiveInt
    vocab_size: PositiveInt
    total_params_b: PositiveFloat
    active_params_b: PositiveFloat
    vision_params_b: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        0.0, description="vision encoder parameters counted in total_params_b: held in memory, not read when "
        "generating text (Gemma 3: 0.42, Llama 4: 0.87)"
    )
    num_experts: NonNegInt = 0
    experts_per_token: NonNegInt = 0
    shared_experts: NonNegInt = 0
    moe_intermediate_size: NonNegInt = 0
    moe_layers: NonNegInt = 0
    kv_lora_rank: NonNegInt = Field(0, description="MLA latent size; 0 = ordinary K/V cache")
    qk_rope_head_dim: NonNegInt = Field(0, description="MLA: decoupled RoPE key width cached beside the latent")
    q_lora_rank: NonNegInt = Field(0, description="MLA: query low-rank width (parameter count only)")
    tied_embeddings: bool = Field(False, description="the LM head shares the input embedding matrix")
    sliding_window_tokens: PositiveInt | None = Field(
        None, description="attention window of the windowed layers (tokens); None = full attention everywhere"
    )
    sliding_window_layers: NonNegInt | None = Field(
        None, description="how many layers use the window (gpt-oss: half, Gemma 3: 52 of 62); "
        "None with a window = every layer (Mistral-7B v0.1)"
    )
    sliding_window_kind: Literal["sliding", "chunked"] = Field(
        "sliding", description="sliding: a token attends to the last sliding_window_tokens; chunked (Llama 4): "
        "to the tokens of its own window-sized chunk. Either way a windowed layer holds at most the window in KV"
    )
    max_context_tokens: PositiveInt
    mtp_layers: NonNegInt = Field(0, description="multi-token-prediction modules for speculative decoding "
                                                 "(config.json num_nextn_predict_layers); 0 = none")
    unquantized_dense: bool = Field(
        False, description="the checkpoint quantizes only the routed experts: attention, routers and every other "
        "non-expert weight stay 16 bit (stored and multiplied) whatever the precision of the experts "
        "(gpt-oss: config.json quantization_config.modules_to_not_convert)")
    source: Source

    @model_validator(mode="after")
    def _check(self) -> Model:
        if self.vision_params_b >= self.total_params_b:
            raise ValueError(f"vision_params_b {self.vision_params_b} must be below total_params_b {self.total_params_b}")
        if (embedding_b := self.vocab_size * self.hidden_size / 1e9) > self.total_params_b:
            raise ValueError(f"total_params_b {self.total_params_b:g} is below the input embedding alone (vocab_size "
                             f"{self.vocab_size:,} × hidden_size {self.hidden_size:,} = {embedding_b:.3g} B "
                             "parameters): check the unit, billions of parameters (llama-3.1-8b: 8.03)")
        if self.active_params_b > self.total_params_b * 1.0001:
            raise ValueError(
                f"active_params_b {self.active_params_b} exceeds total_params_b {self.total_params_b}"
            )
        if self.num_attention_heads % self.num_kv_heads and not self.is_mla:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_kv_heads {self.num_kv_heads}"
            )
        if self.num_experts:
            if not 0 < self.experts_per_token <= self.num_experts:
                raise ValueError("experts_per_token must be in 1..num_experts for an MoE model")
            if not (self.moe_intermediate_size and self.moe_layers):
                raise ValueError("an MoE model needs moe_intermediate_size and moe_layers")
            if self.moe_layers > self.num_layers:
                raise ValueError(f"moe_layers {self.moe_layers} exceeds num_layers {self.num_layers}")
        elif self.experts_per_token or self.shared_experts or self.moe_layers or self.moe_intermediate_size:
            raise ValueError("experts_per_token, shared_experts, moe_layers and moe_intermediate_size "
                             "need num_experts > 0 (a dense model leaves them out)")
        if self.unquantized_dense and not self.num_experts:
            raise ValueError("unquantized_dense describes an MoE checkpoint whose experts alone are quantized; "
                             "a dense model leaves it out")
        if (self.q_lora_rank or self.qk_rope_head_dim) and not self.is_mla:
            raise ValueError("q_lora_rank and qk_rope_head_dim describe MLA: set kv_lora_rank too, or leave them out")
        if self.sliding_window_tokens is None:
            if self.sliding_window_layers:
                raise ValueError(f"sliding_window_layers {self.sliding_window_layers} needs sliding_window_tokens")
        else:
            if self.sliding_window_tokens > self.max_context_tokens:
                raise ValueError(f"sliding_window_tokens {self.sliding_window_tokens} exceeds max_context_tokens "
                                 f"{self.max_context_tokens}; leave the window out for full attention")
            if self.sliding_window_layers is not None and self.sliding_window_layers > self.num_layers:
                raise ValueError(f"sliding_window_layers {self.sliding_window_layers} exceeds num_layers "
                                 f"{self.num_layers}")
            if self.is_mla:
                raise ValueError("a sliding window on an MLA latent cache is not modelled; leave one of them out")
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def sharding_problem(self, tp: int, pp: int, ep: int, max_tp: int | None = None) -> tuple[str, int, str] | None:
        """(degree, its value, why and the fix) when this model cannot be split so, else None:
        every GPU holds num_attention_heads / tp whole heads (vLLM and TensorRT-LLM refuse any other tp),
        each pipeline stage whole layers (pp ≤ num_layers), each expert-parallel GPU whole routed experts
        (ep ≤ num_experts; ep on a dense model is ``optimizer.models.combo_lookup``'s to refuse).
        ``max_tp``: the largest tp the device can run (its server or scale-up domain); the fix lists only the
        divisors up to it."""
        heads = self.num_attention_heads
        if heads % tp:
            top = heads if max_tp is None else min(heads, max_tp)
            divisors = ", ".join(str(k) for k in range(1, top + 1) if heads % k == 0)
            return "tp", tp, (f"{self.key} has {heads} attention heads, which do not split {tp} ways; "
                              f"use a tp that divides {heads} ({divisors})")
        if pp > self.num_layers:
            return "pp", pp, (f"{self.key} has {self.num_layers} layers and each pipeline stage holds whole "
                              f"layers; use pp <= {self.num_layers}")
        if ep > 1 and self.num_experts and ep > self.num_experts:
            return "ep", ep, (f"{self.key} has {self.num_experts} routed experts and each expert-parallel GPU "
                              f"holds whole experts; use ep <= {self.num_experts}")
        if ep > 1 and tp > 1:
            # ep is TensorRT-LLM's DEP (attention data-parallel over ep one-GPU ranks): every measured ep row and
            # every planned ep candidate has tp 1. With tp > 1 the model would split each expert tp ways within
            # ep groups, which no engine it names runs (vLLM and SGLang spread the experts over all tp·ep GPUs)
            g = tp * ep
            fixes = []
            if not self.num_experts or g <= self.num_experts:
                fixes.append(f"tp 1 and ep {g}")
            if heads % g == 0 and (max_tp is None or g <= max_tp):
                fixes.append(f"tp {g} without ep")
            fix = (f"use {' or '.join(fixes)} (the same {g * pp} GPUs)" if fixes
                   else "use tp 1 with ep, or tp without ep")
            return "ep", ep, (f"expert parallelism is modelled with tp 1 (attention data-parallel over ep GPUs, "
                              f"TensorRT-LLM's DEP, the layout measured and planned), not with tp {tp}; {fix}")
        return None

    @property
    def params_per_expert(self) -> float:
        """Parameters of one routed expert summed over the MoE layers: 3 · hidden · moe_ffn · moe_layers."""
        return 3.0 * self.hidden_size * self.moe_intermediate_size * self.moe_layers

    @property
    def routed_expert_params(self) -> float:
        """All routed-expert parameters: num_experts · params_per_expert."""
        return self.num_experts * self.params_per_expert if self.is_moe else 0.0

    @property
    def dense_params(self) -> float:
        """Parameters read on every token whatever the routing, from the shapes: embedding + attention
        + dense FFN layers + shared experts + routers (``architecture_params`` total − routed experts).

        Computed rather than taken as published total − routed experts: published totals are
        rounded ("400B") or count a vision tower, and the difference would all land here
        (Llama-4-Maverick: 12.6B instead of 14.2B).
        """
        return self.architecture_params().total - self.routed_expert_params

    def kv_elements_per_token(self) -> int:
        """Cached elements per token over all layers.

        Ordinary attention: 2 (K and V) · layers · kv_heads · head_dim.
        MLA: layers · (kv_lora_rank + qk_rope_head_dim) — the compressed latent.
        """
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim)
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """KV-cache bytes per token (all layers) at a KV dtype of the given width.

        This is the full-context figure (every layer caches every token); with a sliding
        window it holds for contexts up to the window, beyond which ``effective_kv_tokens``
        says how much less is cached.
        """
        return self.kv_elements_per_token() * kv_bytes_per_element

    @property
    def windowed_layers(self) -> int:
        """Layers whose KV is capped at the window: sliding_window_layers, all layers, or 0."""
        if self.sliding_window_tokens is None:
            return 0
        return self.num_layers if self.sliding_window_layers is None else self.sliding_window_layers

    def effective_kv_tokens(self, context_tokens):
        """Tokens of KV a sequence of ``context_tokens`` holds, in units of all-layer tokens.

        ``(full_layers · c + windowed_layers · min(c, window)) / layers``: multiplied by
        ``kv_bytes_per_token`` it gives the sequence's KV bytes (gpt-oss-120b at c = 8192:
        (18·8192 + 18·128)/36 = 4160 tokens, not 8192). Equals c without a window.
        Works on floats and numpy arrays alike (broadcasts). For ``chunked`` windows it is
        an upper bound (a chunked layer holds c mod window ≤ window tokens).
        """
        if self.sliding_window_tokens is None:
            return context_tokens
        full = self.num_layers - self.windowed_layers
        return (full * context_tokens
                + self.windowed_layers * _elementwise_min(context_tokens, self.sliding_window_tokens)) / self.num_layers

    def kv_bytes_per_sequence(self, context_tokens, kv_bytes_per_element: float):
        """KV-cache bytes of one sequence at ``context_tokens``: effective_kv_tokens · kv_bytes_per_token."""
        return self.effective_kv_tokens(context_tokens) * self.kv_bytes_per_token(kv_bytes_per_element)

    @property
    def embedding_params(self) -> float:
        """Input embedding + LM head parameters: vocab · hidden · (1 if tied else 2)."""
        return float(self.vocab_size) * self.hidden_size * (1 if self.tied_embeddings else 2)

    def architecture_params(self) -> ParamCounts:
        """Parameters computed from the shapes (``catalog.architecture``), to check ``total_params_b``.

        The published total may also count what the shapes leave out (a vision tower, norms,
        biases); the catalog's models agree within 3 %.
        """
        attn = attention_params(hidden=self.hidden_size, heads=self.num_attention_heads, kv_heads=self.num_kv_heads,
                                head_dim=self.head_dim, kv_lora_rank=self.kv_lora_rank, q_lora_rank=self.q_lora_rank,
                                qk_rope_head_dim=self.qk_rope_head_dim)
        return parameter_counts(
            layers=self.num_layers, hidden=self.hidden_size, vocab=self.vocab_size, attention_per_layer=attn,
            intermediate=self.intermediate_size, tied_embeddings=self.tied_embeddings, experts=self.num_experts,
            experts_per_token=self.experts_per_token, moe_layers=self.moe_layers,
            moe_intermediate=self.moe_intermediate_size,
            shared_intermediate=self.shared_experts * self.moe_intermediate_size,
        )


PlatformKind = Literal["baseboard", "rack", "pcie", "cloud-host"]


class CitedSource(Strict):
    """A figure's source: its URL and the date it describes (a detail says which part of the page)."""

    url: str = Field(pattern=r"^https?://\S+$")
    as_of: str = Field(min_length=4, description="date or year the source describes, e.g. 2024-06")
    detail: str = ""


PLATFORM_FIGURES = ("server_usd", "server_power_w", "nic_gb_s_per_gpu", "rack_units")


class Platform(Strict):
    """How a device is bought: a server (board, rack or PCIe chassis) of GPUs, with its own price and power.

    kind:
      - ``baseboard`` (HGX/DGX, OAM): a board of exactly ``gpus_per_server`` GPUs; a server
        is bought with all of them, so a partly used server pays for its idle GPUs;
      - ``rack`` (GB200/GB300 NVL72): the same, for a whole rack (72 GPUs in 18 trays of 4,
        modelled as one 72-GPU unit because the rack is what is sold and priced);
      - ``pcie``: a chassis with up to ``gpus_per_server`` slots, filled with as many cards as
        needed (cards are bought one by one; the chassis is paid in full);
      - ``cloud-host``: rented per accelerator-hour with the host included (no server money).

    ``server_usd`` and ``server_power_w`` are everything but the GPUs: CPUs, memory, NICs,
    switches, fans, chassis (at the nameplate, as the datasheet's maximum system power less
    the GPUs' TDP). ``nic_gb_s_per_gpu`` is scale-out (east-west) network per GPU in Gb/s.
    """

    key: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    name: str = Field(min_length=1, description="product name as an order would read, e.g. NVIDIA HGX H100 8-GPU")
    kind: PlatformKind
    devices: list[str] = Field(min_length=1, description="device keys bought on this platform")
    gpus_per_server: Annotated[int, Field(gt=0, le=DEVICE_CEILINGS["gpus_per_node"][0], description=(
        "GPUs one server (board, rack, chassis) holds; at most the devices' gpus_per_node ceiling, 1,024"))]
    server_usd: Annotated[float, Field(ge=0, le=MAX_SERVER_USD, allow_inf_nan=False)]
    server_power_w: Annotated[float, Field(ge=0, le=MAX_SERVER_POWER_W, allow_inf_nan=False)]
    nic_gb_s_per_gpu: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    rack_units: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    sources: dict[str, CitedSource]
    estimated: dict[str, str] = Field(default_factory=dict, description="figure -> basis of the estimate")
    notes: str = ""

    @model_validator(mode="after")
    def _check(self) -> Platform:
        for figure in PLATFORM_FIGURES:
            if figure not in self.sources and figure not in self.estimated and "specs" not in self.sources:
                raise ValueError(f"{figure} needs a source (sources.{figure} or sources.specs) or an estimate basis")
        unknown = (set(self.estimated) | set(self.sources)) - {*PLATFORM_FIGURES, "specs"}
        if unknown:
            raise ValueError(f"sources/estimated name unknown figure '{sorted(unknown)[0]}'; "
                             f"known: {', '.join(PLATFORM_FIGURES)}, specs")
        if len(set(self.devices)) != len(self.devices):
            raise ValueError("devices lists a device twice")
        return self

    @property
    def fixed_size(self) -> bool:
        """A server is bought with all its GPUs (baseboard, rack), not filled slot by slot."""
        return self.kind in ("baseboard", "rack")


def server_gpus(device: Device, platform: Platform | None) -> int:
    """GPUs of the server a device is bought in: its platform's ``gpus_per_server``, else its own ``gpus_per_node``."""
    return platform.gpus_per_server if platform is not None else device.gpus_per_node


def cloud_instance_gpus(device: Device, platform: Platform | None) -> int:
    """GPUs the cloud rents together under objective cloud: ``cloud_gpus_per_instance``, else as the device
    is bought (a fixed-size board or rack whole, a PCIe card, cloud-host accelerator or device with no
    platform one at a time)."""
    if device.cloud_gpus_per_instance is not None:
        return device.cloud_gpus_per_instance
    return platform.gpus_per_server if platform is not None and platform.fixed_size else 1


def cloud_instance_problem(device: Device, platform: Platform | None) -> str | None:
    """Why the device's ``cloud_gpus_per_instance`` cannot be a rental unit, or None when it can.

    An instance is a slice of one server: its GPUs are the server's (G) or a power of two dividing G.
    Replicas have tp·pp·ep GPUs, powers of two, so each either divides the instance or is a multiple of
    it, and a fleet using g GPUs rents exactly c·⌈g/c⌉ (every instance full but one).
    """
    c, g = device.cloud_gpus_per_instance, server_gpus(device, platform)
    if c is None or c == g or (g % c == 0 and c & (c - 1) == 0):
        return None
    where = f"its platform {platform.key} holds {g}" if platform is not None else f"its gpus_per_node is {g}"
    divisors = [d for d in range(1, g) if g % d == 0 and d & (d - 1) == 0]
    return (f"cloud_gpus_per_instance {c} is not a rental unit of {device.key}: {where} GPUs, and an instance "
            f"is the whole server or a power of two dividing it; use one of {', '.join(map(str, [*divisors, g]))}")


class Precision(Strict):
    """A serving precision: how weights are stored, what computes, what caches.

    Storage: ``weight_bytes_per_param`` is what one weight really occupies, block scales
    included: ``(weight_element_bits + weight_scale_bits / weight_scale_block_params) / 8``
    (NVFP4: (4 + 8/16)/8 = 0.5625 B; MXFP4: (4 + 8/32)/8 = 0.53125 B). Embedding and LM head
    stay in ``embedding_bytes_per_param`` (BF16 in FP8/FP4 checkpoints); ``model_weight_bytes``
    combines the two. Attention math (QK^T, softmax·V) runs in ``attention_dtype`` whatever
    the GEMM dtype.
    """

    key: Literal["bf16", "fp16", "fp8", "int8", "int4", "fp4", "nvfp4", "mxfp4"]
    description: str
    weight_bytes_per_param: PositiveFloat = Field(
        description="stored bytes per weight, block scales included (= weight_bits_per_param / 8)"
    )
    weight_element_bits: PositiveInt = Field(description="bits of one weight element (E2M1: 4, E4M3: 8, BF16: 16)")
    weight_scale_bits: NonNegInt = Field(
        0, description="bits of the scale stored once per block (E4M3: 8, E8M0: 8; fp16 scale + 4-bit zero: 20)"
    )
    weight_scale_block_params: NonNegInt = Field(
        0, description="weights sharing one scale (NVFP4 16, MXFP4 32, AWQ group 128); 0 = per-tensor or "
        "per-channel scales, whose bytes are negligible"
    )
    embedding_bytes_per_param: PositiveFloat = Field(
        description="bytes per parameter of the input embedding and LM head, which quantized checkpoints keep in BF16"
    )
    compute_dtype: ComputeDtype
    attention_dtype: Literal["bf16", "fp16", "fp8"] = Field(
        description="dtype of the attention math (QK^T, softmax·V): FP8 or 16 bit even when GEMMs run in FP4"
    )
    kv_dtype: Literal["bf16", "fp16", "fp8", "int8"]
    kv_bytes_per_element: PositiveFloat
    weight_only: bool = Field(
        description="weights dequantized to the compute dtype on the fly (e.g. int4 AWQ/GPTQ)"
    )
    activation_bytes: PositiveFloat = Field(2.0, description="bytes per activation element exchanged in all-reduce")
    native_vendors: list[Vendor] = Field(
        default_factory=list, description="vendors whose devices run this format natively (NVFP4: nvidia); "
        "empty = any device with a peak for compute_dtype"
    )
    sources: dict[str, Source] = Field(default_factory=dict, description="figure -> where it comes from")

    @model_validator(mode="after")
    def _check(self) -> Precision:
        if bool(self.weight_scale_bits) != bool(self.weight_scale_block_params):
            raise ValueError("weight_scale_bits and weight_scale_block_params go together (both 0 = no block scales)")
        if abs(self.weight_bits_per_param - self.weight_bits_from_format) > 1e-9:
            raise ValueError(
                f"weight_bytes_per_param {self.weight_bytes_per_param} is not (weight_element_bits "
                f"{self.weight_element_bits} + weight_scale_bits {self.weight_scale_bits} / weight_scale_block_params "
                f"{self.weight_scale_block_params}) / 8 = {self.weight_bits_from_format / 8:g}"
            )
        return self

    @property
    def weight_bits_per_param(self) -> float:
        """Stored bits per weight, block scales included: 8 · weight_bytes_per_param (NVFP4 4.5, MXFP4 4.25)."""
        return 8.0 * self.weight_bytes_per_param

    @property
    def weight_bits_from_format(self) -> float:
        """element bits + scale bits / block size: what ``weight_bits_per_param`` must equal."""
        scale = self.weight_scale_bits / self.weight_scale_block_params if self.weight_scale_block_params else 0.0
        return self.weight_element_bits + scale

    def model_weight_bytes(self, model: Model) -> float:
        """Bytes of a model's weights: (total − embedding params) · weight bytes + embedding params · embedding bytes."""
        embed = model.embedding_params
        return (model.total_params_b * 1e9 - embed) * self.weight_bytes_per_param + embed * self.embedding_bytes_per_param

    def attention_peak_tflops(self, device: Device) -> float | None:
        """Dense peak of ``attention_dtype`` on ``device`` (the 16-bit peak for bf16/fp16), None if unsupported."""
        if self.attention_dtype in ("bf16", "fp16"):
            return device.peak_tflops(self.attention_dtype) or device.peak_16bit_tflops
        return device.peak_tflops(self.attention_dtype)

    def compute_peak_tflops(self, device: Device) -> float | None:
        """Peak the device reaches in this precision, or None when it cannot run it natively.

        Weight-only formats compute in 16 bit, so they run wherever 16-bit tensor math does.
        """
        if self.native_vendors and device.vendor not in self.native_vendors:
            return None
        if self.weight_only:
            return device.peak_16bit_tflops
        if self.compute_dtype == "bf16":
            return device.bf16_tflops
        return device.peak_tflops(self.compute_dtype)

    def unsupported_reason(self, device: Device) -> str | None:
        """Why ``device`` cannot run this precision, or None when it can."""
        if self.native_vendors and device.vendor not in self.native_vendors:
            return (f"{device.key} ({device.vendor}) has no native {self.key} support (only "
                    f"{', '.join(self.native_vendors)} devices); use a precision it supports")
        if self.compute_peak_tflops(device) is not None:
            return None
        field = PEAK_FIELD_BY_DTYPE[self.compute_dtype]
        return (
            f"{device.key} has no native {self.compute_dtype} compute (no {field} figure); "
            f"use a precision it supports"
        )
