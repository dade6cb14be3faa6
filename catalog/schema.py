"""Strict pydantic models of the catalog: devices, models, precisions.

Every quantity carries its unit in its name. Every device figure names its source and
as-of date; figures not published are either absent (the device cannot do what needs
them, e.g. no ``fp8_tflops`` = no native FP8) or estimated with a stated basis.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(Strict):
    """Where a figure comes from and when it was true."""

    source: str = Field(min_length=1)
    as_of: str = Field(min_length=4, description="date or year the source describes, e.g. 2024-06")


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
    gpus_per_node: PositiveInt
    purchase_usd: PositiveFloat | None = None
    cloud_usd_per_gpu_hour: PositiveFloat | None = None
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
        for field in ("purchase_usd", "cloud_usd_per_gpu_hour"):
            if getattr(self, field) is not None and field not in self.sources and field not in self.estimated:
                raise ValueError(f"{field} needs a source (sources.{field}) or an estimate basis")
        for field, (low, high) in self.ranges.items():
            if not 0 < low <= high:
                raise ValueError(f"ranges.{field}: low {low} must be > 0 and <= high {high}")
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
    num_experts: NonNegInt = 0
    experts_per_token: NonNegInt = 0
    shared_experts: NonNegInt = 0
    moe_intermediate_size: NonNegInt = 0
    moe_layers: NonNegInt = 0
    kv_lora_rank: NonNegInt = Field(0, description="MLA latent size; 0 = ordinary K/V cache")
    qk_rope_head_dim: NonNegInt = 0
    sliding_window_tokens: PositiveInt | None = None
    max_context_tokens: PositiveInt
    source: Source

    @model_validator(mode="after")
    def _check(self) -> Model:
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
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

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
        """Parameters read on every token whatever the routing: total − routed experts."""
        return self.total_params_b * 1e9 - self.routed_expert_params

    def kv_elements_per_token(self) -> int:
        """Cached elements per token over all layers.

        Ordinary attention: 2 (K and V) · layers · kv_heads · head_dim.
        MLA: layers · (kv_lora_rank + qk_rope_head_dim) — the compressed latent.
        """
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim)
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """KV-cache bytes per token (all layers) at a KV dtype of the given width."""
        return self.kv_elements_per_token() * kv_bytes_per_element


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
    gpus_per_server: PositiveInt
    server_usd: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    server_power_w: Annotated[float, Field(ge=0, allow_inf_nan=False)]
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


class Precision(Strict):
    """A serving precision: how weights are stored, what computes, what caches."""

    key: Literal["bf16", "fp16", "fp8", "int8", "int4", "fp4"]
    description: str
    weight_bytes_per_param: PositiveFloat
    compute_dtype: ComputeDtype
    kv_dtype: Literal["bf16", "fp16", "fp8", "int8"]
    kv_bytes_per_element: PositiveFloat
    weight_only: bool = Field(
        description="weights dequantized to the compute dtype on the fly (e.g. int4 AWQ/GPTQ)"
    )
    activation_bytes: PositiveFloat = Field(2.0, description="bytes per activation element exchanged in all-reduce")

    def compute_peak_tflops(self, device: Device) -> float | None:
        """Peak the device reaches in this precision, or None when it cannot run it natively.

        Weight-only formats compute in 16 bit, so they run wherever 16-bit tensor math does.
        """
        if self.weight_only:
            return device.peak_16bit_tflops
        if self.compute_dtype == "bf16":
            return device.bf16_tflops
        return device.peak_tflops(self.compute_dtype)

    def unsupported_reason(self, device: Device) -> str | None:
        """Why ``device`` cannot run this precision, or None when it can."""
        if self.compute_peak_tflops(device) is not None:
            return None
        field = PEAK_FIELD_BY_DTYPE[self.compute_dtype]
        return (
            f"{device.key} has no native {self.compute_dtype} compute (no {field} figure); "
            f"use a precision it supports"
        )
