"""Calibration parameters of the performance model: efficiency factors, overheads, memory.

The performance model (``optimizer.models.perf``) turns datasheet figures into times; these
parameters say how much of each datasheet peak real serving software reaches. They are
fitted by ``optimizer.calibration.fit`` to measured throughput and shipped in
``optimizer/models/data/calibration.yaml``; a user replaces them with ``--params FILE``.

A factor applies to a device through its *class* — vendor, generation or memory type —
never through its key, so the model predicts devices it has no measurements for; and
through the serving *engine* (``trtllm``, ``vllm``, ``sglang``) and the *compute dtype* of
the GEMMs (FP4 GEMMs reach a smaller share of their peak than FP8 ones).

``overrides`` are applied in order; an override matches a (device, engine, dtype) when every
selector it gives (``vendor``, ``generation``, ``memory_type``, ``engine``, ``compute_dtype``,
``weight_only``) equals the configuration's and the device's vendor is not one of its
``exclude_vendors``; later matches win.

A GEMM dtype the fit had no rows of (not in ``measured_compute_dtypes``) gets no datasheet
speed-up on trust: its achieved FLOPS are at most ``unmeasured_dtype_speedup_cap`` times those of
the next wider measured dtype on the same device (fp4 → fp8 → 16 bit, int8 → 16 bit;
``CalibrationParams.unmeasured_dtype_bound``).

The engine of a configuration defaults per vendor (``default_engine``): NVIDIA devices
run TensorRT-LLM (``trtllm``, what NVIDIA publishes its tables with), every other vendor
vLLM (``vllm``: AMD publishes its MI300X tables with vLLM on ROCm; Intel Gaudi and Google
TPU serve through vLLM back ends too). A workload or the CLI (``--engine``) may choose another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, Field, ValidationError, model_validator

from catalog.errors import ModelError, suggest
from catalog.files import format_validation_error, parse_yaml_text, read_yaml
from catalog.schema import ComputeDtype, Device, Precision, Strict

if TYPE_CHECKING:
    from catalog.load import Catalog

Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
# The least share of its peak an efficiency factor may claim. The fit searches no efficiency below 0.02 (decode
# attention; 0.05 and up for the others: optimizer.calibration.fit._global_knobs, class_overrides) and the shipped
# fit's smallest is 0.11 (decode attention). A kernel at under 1 % of its datasheet rate makes the device slower
# than one a hundredth its size; such a value is a slip (1e-300, or a share written per mille), and planned it
# read as an SLO no fleet meets ('relax the SLO', TPOT 1.2e299 ms at compute_efficiency 1e-300), the file unnamed.
MIN_EFFICIENCY = 0.01


def _plausible_share(value: float) -> float:
    if value < MIN_EFFICIENCY:
        raise ValueError(f"{value:g} is below {MIN_EFFICIENCY:g}: an efficiency is the share of the device's peak a "
                         f"kernel reaches (0.6 = 60 %), and `gpuplan calibrate` fits none below 0.02; write it as a share of 1, or "
                         "refit it with `gpuplan calibrate`")
    return value


Efficiency = Annotated[Fraction, AfterValidator(_plausible_share)]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PARAMS_FILE = "calibration.yaml"
Engine = Literal["trtllm", "vllm", "sglang"]
ENGINES: tuple[str, ...] = ("trtllm", "vllm", "sglang")
FidelityClass = Literal["a", "b", "c"]
# The next wider GEMM dtype of each narrower one, for the bound on an unmeasured dtype
# (``CalibrationParams.unmeasured_dtype_bound``); 16 bit is the widest and is never bounded.
WIDER_COMPUTE_DTYPE: dict[str, str] = {"fp4": "fp8", "fp8": "bf16", "int8": "bf16"}
SIXTEEN_BIT_DTYPES = ("bf16", "fp16")


def default_engine(device: Device) -> str:
    """The serving engine a device runs unless told otherwise: NVIDIA → trtllm, others → vllm."""
    return "trtllm" if device.vendor == "nvidia" else "vllm"


def check_engine(engine: str) -> str:
    """``engine`` if it is a known engine, else a one-line error naming the choices."""
    if engine not in ENGINES:
        raise ModelError(f"unknown engine '{engine}'; known: {', '.join(ENGINES)}")
    return engine


class FactorOverride(Strict):
    """Factors for one class of devices; ``None`` keeps the value from the defaults."""

    vendor: str | None = None
    exclude_vendors: list[str] | None = Field(None, description="every vendor but these (the fit writes it for "
                                              "an engine measured on other vendors than the reference engine: "
                                              "optimizer.calibration.fit.engine_selectors)")
    generation: str | None = None
    memory_type: str | None = None
    engine: Engine | None = None
    compute_dtype: str | None = Field(None, description="dtype of the GEMMs (bf16, fp16, fp8, int8, fp4)")
    weight_only: bool | None = Field(None, description="true: only weight-only-quantized precisions (W4A16: "
                                     "the GEMM dequantizes every weight tile to 16 bit before its 16-bit MMA), "
                                     "false: only the others")
    memory_bandwidth_efficiency: Efficiency | None = None
    compute_efficiency: Efficiency | None = None
    attention_efficiency: Efficiency | None = None
    moe_efficiency: Efficiency | None = None
    step_overhead_ms: NonNeg | None = None
    sequence_overhead_us: NonNeg | None = None
    max_batch_sequences: int | None = Field(None, gt=0)
    alltoall_latency_us: NonNeg | None = Field(
        None, description="fixed time of one expert-parallel dispatch or combine on this class: its MoE "
        "communication path (kernels, routing/permutation launches) as measured; None = the default's")
    note: str = ""

    @model_validator(mode="after")
    def _has_selector(self) -> FactorOverride:
        if all(getattr(self, k) is None for k in SELECTORS):
            raise ValueError("an override needs at least one of " + ", ".join(SELECTORS)
                             + " (factors never depend on a single device key)")
        return self

    def matches(self, device: Device, engine: str | None = None, compute_dtype: str | None = None,
                weight_only: bool = False) -> bool:
        if self.exclude_vendors is not None and device.vendor in self.exclude_vendors:
            return False
        return all(
            want is None or want == have
            for want, have in ((self.vendor, device.vendor), (self.generation, device.generation),
                               (self.memory_type, device.memory_type), (self.engine, engine),
                               (self.compute_dtype, compute_dtype), (self.weight_only, weight_only))
        )

    @property
    def selector(self) -> str:
        """``vendor=amd,engine=vllm``: the selectors this override gives."""
        def text(v) -> str:
            return "|".join(v) if isinstance(v, list) else str(v)
        return ",".join(f"{k}={text(getattr(self, k))}" for k in SELECTORS if getattr(self, k) is not None)


SELECTORS = ("vendor", "exclude_vendors", "generation", "memory_type", "engine", "compute_dtype", "weight_only")
FACTOR_FIELDS = ("memory_bandwidth_efficiency", "compute_efficiency", "attention_efficiency", "moe_efficiency",
                 "step_overhead_ms", "sequence_overhead_us", "max_batch_sequences", "alltoall_latency_us")


class ErrorBand(Strict):
    """An 80 % interval of true/predicted capacity for one fidelity class, from leave-out residuals
    (``optimizer.calibration.bands``: a latency row counts as predicted/measured; each held-out group weighs 1)."""

    low_factor: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(
        description="10th percentile of true/predicted capacity: the low end is predicted × low_factor")
    high_factor: Annotated[float, Field(ge=1, allow_inf_nan=False)] = Field(
        description="90th percentile of true/predicted capacity: the high end is predicted × high_factor")
    n: int = Field(ge=0, description="leave-out residuals the band rests on")
    basis: str = Field(description="which leave-out predictions gave the residuals")


class Coverage(Strict):
    """Which (device, engine) pairs, generations and vendors the fit had measurements of."""

    device_engines: list[str] = Field(default_factory=list, description="'device/engine' pairs measured")
    generations: list[str] = Field(default_factory=list)
    vendors: list[str] = Field(default_factory=list)
    expert_parallel_device_engines: list[str] | None = Field(
        None, description="'device/engine' pairs measured with expert parallelism (ep > 1); None = not recorded "
        "(parameter files written before it was), so an ep configuration keeps its device's class")
    generation_engines: list[str] | None = Field(
        None, description="'generation/engine' pairs measured; None = not recorded (parameter files written before "
        "it was), so a device of a measured generation is same-generation whatever its engine")
    moe_generation_engines: list[str] | None = Field(
        None, description="'generation/engine' pairs measured with a mixture-of-experts model; None = not recorded "
        "(parameter files written before it was), so a MoE configuration keeps its device's class")
    weight_only_generation_engines: list[str] | None = Field(
        None, description="'generation/engine' pairs measured with a weight-only precision (W4A16); None = not "
        "recorded (parameter files written before it was), so a weight-only configuration keeps its device's class")


# fewer measured rows of a configuration than this say too little to report it (one source's table has 3-11 per model)
MIN_CONFIGURATION_ROWS = 3


def configuration_key(device: str, engine: str, model: str, precision: str, tp: int, ep: int) -> str:
    """The key of one served configuration in ``FitRecord.by_configuration``:
    ``device/engine/model/precision/tpT/epE`` (pipeline parallelism is never measured)."""
    return f"{device}/{engine}/{model}/{precision}/tp{tp}/ep{ep}"


def configuration_of(key: str) -> tuple[str, str, str, str, int, int]:
    """(device, engine, model, precision, tp, ep) of a ``configuration_key``."""
    device, engine, model, precision, tp, ep = key.split("/")
    return device, engine, model, precision, int(tp.removeprefix("tp")), int(ep.removeprefix("ep"))


class ConfigurationRecord(Strict):
    """How the fitted model did on one configuration's own offline max-throughput rows (in-sample)."""

    n: int = Field(ge=1, description="rows of this configuration in the fit")
    median_measured_over_predicted: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        description="median of measured / predicted output tokens/s over those rows")


class FitRecord(Strict):
    """Where fitted parameters came from and how well they fit (never hidden)."""

    data_file: str
    data_sha256: str = ""
    rows_used: int = Field(ge=0)
    method: str
    median_abs_pct_error: NonNeg
    p90_abs_pct_error: NonNeg
    by_source_group: dict[str, dict[str, float | int]] = Field(default_factory=dict)
    by_device: dict[str, dict[str, float | int]] = Field(default_factory=dict)
    by_configuration: dict[str, ConfigurationRecord] = Field(
        default_factory=dict, description="offline max-throughput rows by configuration (``configuration_key``: "
        "device/engine/model/precision/tpT/epE): n and the median measured / predicted output tokens/s of these "
        "fitted parameters (in-sample); a plan deployment on a configuration whose rows the model misses by "
        "more than its band gets a warning (optimizer.planning.known_limits)")
    leave_out: dict[str, dict[str, dict[str, float | int]]] = Field(
        default_factory=dict, description="leave-one-group-out refits by grouping (source_group, device, "
        "generation) and held-out group: n, median and p90 |error| % of its offline rows, and the share "
        "inside the band of its fidelity class")
    fitted_on: str = ""


class CalibrationParams(Strict):
    """Efficiency factors and overheads of the replica model (see ``optimizer.models.perf``)."""

    memory_bandwidth_efficiency: Efficiency = Field(
        0.8, description="achieved / peak memory bandwidth for decode reads (weights + KV)")
    compute_efficiency: Efficiency = Field(
        0.6, description="GEMMs: achieved / dense peak tensor FLOPS of the compute dtype (overrides by "
        "compute_dtype and engine)")
    attention_efficiency: Efficiency = Field(
        0.3, description="decode attention math: achieved / dense peak of the attention dtype")
    prefill_attention_efficiency: Efficiency | None = Field(
        None, description="context (prefill) attention math: achieved / dense peak of the attention dtype "
        "(FMHA context kernels, a different kernel from decode attention); None = attention_efficiency "
        "(parameter files fitted before it existed)")
    moe_efficiency: Efficiency = Field(
        1.0, description="routed-expert grouped GEMMs: share of compute_efficiency they reach (many "
        "small per-expert GEMMs; overrides by generation)")
    moe_tile_tokens: Annotated[float, Field(ge=1, le=512, allow_inf_nan=False)] = Field(
        1.0, description="grouped-GEMM tile height: every routed expert a step touches computes at "
        "least this many token rows (padding to the kernel's M tile), so MoE FLOPs per step are "
        "2·expert·max(k·T, touched·tile)")
    moe_glue_bytes_per_element: Annotated[float, Field(ge=0, le=1000, allow_inf_nan=False)] = Field(
        0.0, description="MoE routing glue outside the grouped GEMMs (top-k, permute, activation quantize, "
        "un-permute and weighted sum): bytes moved per routed token-expert pair per hidden element per MoE layer, "
        "at the achieved memory bandwidth, a memory-bound term beside the grouped GEMMs: "
        "t_glue = T·k·hidden·moe_layers·g/(p·e) / (bw·e_bw) per step (optimizer.models.perf); 0 = none (parameter "
        "files fitted before it existed); gpuplan calibrate fits it from a hand count of 8")
    smooth_max_exponent: Annotated[float, Field(ge=1, le=64, allow_inf_nan=False)] = Field(
        64.0, description="n of the smooth roofline max (a^n + b^n)^(1/n) of each operator's memory "
        "and compute times; 64 is a hard max to 1 %, smaller n adds the overlap loss near the ridge; "
        "a power of two (2, 4, ..., 32) evaluates several times faster than another value")
    offline_whole_prompts: bool = Field(
        False, description="offline max-throughput steady state: true = whole prompts start as "
        "sequences finish (Poisson per step and attention rank, the lockstep ranks of an EP replica "
        "wait for the busiest: optimizer.models.perf.offline_step_s); false = every step prefills the "
        "mean input·batch/output tokens (the fit of the shipped parameters)")
    offline_prefill_chunk_tokens: Annotated[float, Field(ge=1, allow_inf_nan=False)] | None = Field(
        None, description="with offline_whole_prompts: a prompt is prefilled in chunks of at most this many tokens, "
        "one per attention rank and step (chunked prefill under the engine's per-rank token budget, TensorRT-LLM "
        "max_num_tokens); None = whole prompts in one step")
    ep_allgather: bool = Field(
        False, description="expert-parallel MoE communication: true = every token's hidden state is all-gathered to "
        "every one of the e ranks (e − 1 copies, quantized to the experts' GEMM input: 1 B FP8, 0.5625 B NVFP4, 2 B "
        "16 bit) and the experts' outputs reduce-scattered back in BF16, as TensorRT-LLM's attention-DP MoE does "
        "without its all-to-all path (optimizer.models.moe_routing.ranks_receiving_token); false = a dispatch to "
        "the ranks holding one of the token's experts, 16-bit both ways (the fit of the shipped parameters)")
    class_shrinkage: NonNeg = Field(
        0.0, description="fit only (optimizer.calibration.fit): ridge strength λ of the penalty λ·Σ (log(override / "
        "parent))² on every fitted generation and memory-type override's deviation from its parent (global) "
        "value, a Gaussian prior that keeps a class with few rows near its parent; one value for every class, "
        "to be chosen by the leave-out errors (docs/model-accuracy.md); 0 = unpenalised (the shipped fit)")
    fit_rounds: int = Field(
        1, ge=1, le=10, description="fit only: rounds of the coordinate search (optimizer.calibration.fit), "
        "each restarting its grid span from the current values, so a fit (and every leave-out refit) leaves a "
        "narrow basin a single shrinking search stops in; 1 = one search (the fit before model-v8)")
    fit_loss: Literal["squared", "soft_l1", "huber", "cauchy"] = Field(
        "soft_l1", description="fit only (optimizer.calibration.lsq.robust_loss): the loss ρ of each row's log error "
        "e = log(pred/meas) (offline, one-batch latency and online rows; the class prior stays squared), summed "
        "with the row weights w: Σ w·C²·ρ((e/C)²) with C = fit_loss_scale_log and ρ(z) = z (squared, the fits before "
        "fit-v10), 2(√(1+z) − 1) (soft_l1), z if z ≤ 1 else 2√z − 1 (huber), ln(1 + z) (cauchy): quadratic for |e| ≪ C, "
        "so a robust loss weighs typical rows as the squared one does and the worst rows less; soft_l1 at 0.1, the "
        "shipped fit's (fit-v10), so `gpuplan calibrate --shipped` without --params starts where the shipped fit did")
    fit_loss_scale_log: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] = Field(
        0.1, description="fit only: the scale C of fit_loss, in log units (0.1 = a 10.5 % error); unused by 'squared'")
    step_overhead_ms: NonNeg = Field(
        1.0, description="fixed time per scheduler step (launches, sampling, scheduling)")
    sequence_overhead_us: NonNeg = Field(
        1.0, description="host time per running sequence per step (sampling, scheduling, detokenising)")
    request_overhead_ms: NonNeg = Field(
        0.0, description="front-end time per request outside the scheduler's steps (tokenising, "
        "queueing into the engine, first-token detokenising and HTTP), added once to TTFT and to "
        "E2E, not to TPOT; fitted to the online-serving TTFT rows (0 = parameter files fitted "
        "before it existed)")
    link_efficiency: Efficiency = Field(
        0.7, description="achieved / peak per-direction link bandwidth in all-reduce")
    pcie_link_efficiency: Efficiency | None = Field(
        None, description="achieved / peak per-direction host-link (PCIe) bandwidth in all-reduce when the "
        "group spans more than the scale-up domain (NCCL rings through PCIe switches and the host, a different "
        "path from NVLink); None = link_efficiency (parameter files fitted before it existed)")
    allreduce_latency_us: NonNeg = Field(
        8.0, description="fixed latency of one all-reduce inside the scale-up domain")
    pcie_allreduce_latency_us: NonNeg = Field(
        25.0, description="fixed latency of one all-reduce over host PCIe")
    alltoall_latency_us: NonNeg | None = Field(
        None, description="fixed latency of one expert-parallel all-to-all (dispatch or combine); None = the "
        "all-reduce latency of the same link (allreduce_latency_us, pcie_allreduce_latency_us): both are one "
        "NCCL collective over the same links, and the fit ties them (a free all-to-all latency absorbed "
        "unmodelled per-layer MoE costs of some engines, 165-200 us, and then slowed every EP replica)")
    pp_hop_latency_us: NonNeg = Field(
        20.0, description="pipeline parallelism: fixed latency of one stage-to-stage activation send "
        "(uncalibrated: no pipeline-parallel measurements)")
    pp_microbatch_overhead_us: NonNeg = Field(
        50.0, description="pipeline parallelism: host time per micro-batch per step (scheduling one "
        "more micro-batch; uncalibrated: no pipeline-parallel measurements)")
    memory_usable_fraction: Fraction = Field(
        0.92, description="share of device memory (memory_gb GiB) the serving engine may use "
        "for weights, workspace and KV cache")
    workspace_gb_per_gpu: NonNeg = Field(
        1.5, description="activation/workspace memory per GPU (GiB) outside weights and KV")
    max_batch_sequences: int = Field(
        2048, gt=0, description="scheduler cap on running sequences in the offline benchmarks, per "
        "attention rank (a replica with ep attention data-parallel ranks runs up to ep times as many)")
    kv_reserved_output_fraction: Fraction = Field(
        1.0, description="share of the output length whose KV is reserved per running sequence "
        "when the batch is limited by memory (1 = guaranteed-no-evict scheduling)")
    measured_compute_dtypes: list[ComputeDtype] | None = Field(
        None, description="GEMM dtypes the fit had rows of (written by optimizer.calibration.fit.fit_params); a dtype "
        "not listed is unmeasured and its GEMMs reach at most unmeasured_dtype_speedup_cap × the achieved FLOPS of "
        "the next wider measured dtype on the same device (unmeasured_dtype_bound); None = every dtype counts as "
        "measured (parameter files fitted before it existed, the built-in defaults)")
    measured_compute_dtypes_by_vendor: dict[str, list[ComputeDtype]] | None = Field(
        None, description="GEMM dtypes the fit had rows of, by device vendor (written by the fit): when given, a "
        "dtype counts as measured on a device only if its vendor's rows had it (a GEMM kernel's share of its peak "
        "is the vendor's kernel stack: NVFP4 measured on B200 says nothing of MXFP4 on MI355X); a vendor absent "
        "here has no measured dtype (its narrower dtypes are held to its 16-bit GEMMs); None = "
        "measured_compute_dtypes for every vendor")
    unmeasured_dtype_speedup_cap: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        1.0, description="an unmeasured GEMM dtype's achieved FLOPS ≤ this × those of the next wider measured dtype "
        "(fp4 → fp8 → 16 bit, int8 → 16 bit) on the same device: 1.0 = no faster than the wider dtype until a "
        "measurement says so, instead of the datasheet's 2x (the shipped fit's FP4 GEMMs reach 0.36 of the FP4 "
        "peak against FP8's 0.76 of the FP8 peak: 0.95x the FP8 FLOPS; docs/model-accuracy.md, 'Unmeasured "
        "compute dtypes (fp4prior)'); not fitted (no row of an unmeasured dtype can identify it)")
    overrides: list[FactorOverride] = Field(default_factory=list)
    error_bands: dict[FidelityClass, ErrorBand] = Field(
        default_factory=dict, description="80 % interval of true/predicted capacity by fidelity class "
        "(a: device+engine measured, b: same generation/vendor measured, c: datasheet only)")
    coverage: Coverage | None = None
    fit: FitRecord | None = None

    def measured_configuration(self, key: str) -> ConfigurationRecord | None:
        """The fit record of configuration ``key`` (``configuration_key``): n and the median measured / predicted
        throughput of its rows, when the fit had at least MIN_CONFIGURATION_ROWS of them; else None."""
        rec = self.fit.by_configuration.get(key) if self.fit is not None else None
        return rec if rec is not None and rec.n >= MIN_CONFIGURATION_ROWS else None

    def factors_for(self, device: Device, engine: str | None = None, compute_dtype: str | None = None,
                    weight_only: bool = False) -> DeviceFactors:
        """Factors for ``device`` served by ``engine`` (default: ``default_engine``) with GEMMs in
        ``compute_dtype`` (``weight_only``: a weight-only-quantized precision): the defaults, then
        every matching override in order."""
        engine = engine or default_engine(device)
        values = {k: getattr(self, k) for k in FACTOR_FIELDS}
        for o in self.overrides:
            if o.matches(device, engine, compute_dtype, weight_only):
                values.update({k: getattr(o, k) for k in FACTOR_FIELDS if getattr(o, k) is not None})
        return DeviceFactors(**values)

    @property
    def tracks_measured_dtypes(self) -> bool:
        """Whether the fit recorded which GEMM dtypes it measured (else every dtype counts as measured)."""
        return self.measured_compute_dtypes is not None or self.measured_compute_dtypes_by_vendor is not None

    def measured_dtypes_on(self, device: Device) -> list[str] | None:
        """The GEMM dtypes measured on ``device``'s vendor (``measured_compute_dtypes_by_vendor``), else on any
        vendor (``measured_compute_dtypes``); None: every dtype counts as measured."""
        if self.measured_compute_dtypes_by_vendor is not None:
            return list(self.measured_compute_dtypes_by_vendor.get(device.vendor, []))
        return self.measured_compute_dtypes

    def unmeasured_dtype_bound(self, device: Device, engine: str | None, compute_dtype: str) -> DtypeBound | None:
        """The achieved-FLOPS bound of GEMMs in ``compute_dtype`` on ``device`` served by ``engine`` when the
        dtype is unmeasured (not in ``measured_compute_dtypes``), else None (also for 16 bit, the widest, and
        for a device without a peak in the dtype).

        Walks ``WIDER_COMPUTE_DTYPE`` from the dtype to the first wider one the device has a peak in that is
        measured (or 16 bit, the end of the chain): bound = cap·e_w·peak_w, e_w that dtype's GEMM efficiency
        here (``factors_for``), peak_w its dense peak (16 bit: ``Device.peak_16bit_tflops``). The GEMMs then
        run at ``min(e·peak, bound)``: fp4 unmeasured, fp8 measured, cap 1 gives min(e_fp4·P_fp4, e_fp8·P_fp8).
        A weight-only precision computes in 16 bit, so it is never bounded."""
        measured = self.measured_dtypes_on(device)
        if measured is None or compute_dtype in measured or compute_dtype in SIXTEEN_BIT_DTYPES:
            return None
        own_peak = device.peak_tflops(compute_dtype)
        if not own_peak:
            return None
        own = self.factors_for(device, engine, compute_dtype).compute_efficiency * own_peak * 1e12
        wider = WIDER_COMPUTE_DTYPE.get(compute_dtype)
        while wider is not None:
            sixteen = wider in SIXTEEN_BIT_DTYPES
            peak = device.peak_16bit_tflops if sixteen else device.peak_tflops(wider)
            if peak and (sixteen or wider in measured):
                e = self.factors_for(device, engine, wider).compute_efficiency
                return DtypeBound(compute_dtype, wider, own, self.unmeasured_dtype_speedup_cap * e * peak * 1e12,
                                  device.vendor if self.measured_compute_dtypes_by_vendor is not None else None)
            wider = WIDER_COMPUTE_DTYPE.get(wider)
        return None

    def binding_dtype_bound(self, device: Device, engine: str | None, precision: Precision) -> DtypeBound | None:
        """``unmeasured_dtype_bound`` of ``precision``'s GEMM dtype on ``device`` where it binds (below the dtype's
        own e·peak), else None: also for a weight-only precision (its GEMMs run in 16 bit) and one the device
        cannot compute. What the replica model, ``gpuplan estimate`` and a plan's fidelity read."""
        if precision.weight_only or precision.compute_peak_tflops(device) is None:
            return None
        bound = self.unmeasured_dtype_bound(device, engine, precision.compute_dtype)
        return bound if bound is not None and bound.binds else None


@dataclass(frozen=True)
class DtypeBound:
    """An unmeasured GEMM dtype on one device: ``own_flops_s`` = e·peak of the dtype itself,
    ``bound_flops_s`` = cap·e·peak of the next wider measured dtype ``wider`` (FLOP/s)."""

    dtype: str
    wider: str
    own_flops_s: float
    bound_flops_s: float
    vendor: str | None = None  # the vendor the dtype is unmeasured on (None: on every vendor)

    @property
    def binds(self) -> bool:
        """The bound is below the dtype's own achieved FLOPS (the GEMMs are slowed by it)."""
        return self.bound_flops_s < self.own_flops_s

    def note(self, cap: float) -> str:
        """One line for a fidelity basis: what the prediction rests on."""
        times = "" if cap == 1.0 else f"{cap:g} × "
        on = f" on {self.vendor} devices" if self.vendor else ""
        return (f"{self.dtype} GEMMs unmeasured{on} in this calibration: capped at {times}the achieved FLOPS of "
                f"{self.wider} GEMMs on this device (unmeasured_dtype_speedup_cap {cap:g}), not the datasheet "
                f"{self.dtype} peak")


@dataclass(frozen=True)
class DeviceFactors:
    memory_bandwidth_efficiency: float
    compute_efficiency: float
    attention_efficiency: float
    moe_efficiency: float
    step_overhead_ms: float
    sequence_overhead_us: float
    max_batch_sequences: int
    alltoall_latency_us: float | None  # None: the all-reduce latency of the link


def shipped_params_path() -> Path:
    return Path(str(resources.files("optimizer.models").joinpath("data", PARAMS_FILE)))


def parse_params(data: dict[str, Any], where: str) -> CalibrationParams:
    try:
        return CalibrationParams.model_validate(data)
    except ValidationError as exc:
        raise ModelError(format_validation_error(where, exc, CalibrationParams)
                         + "; fix the file or re-run `gpuplan calibrate`") from None


def check_selectors(params: CalibrationParams, devices: Mapping[str, Device], compute_dtypes: Iterable[str],
                    where: str) -> CalibrationParams:
    """``params`` if every override selector names a vendor, generation, memory type or GEMM dtype that
    something in the catalog has; else a one-line error naming the override, the value and the choices
    (``vendor: nvdia`` would otherwise match nothing, silently)."""
    known = {"vendor": {d.vendor for d in devices.values()}, "generation": {d.generation for d in devices.values()},
             "memory_type": {d.memory_type for d in devices.values()}, "compute_dtype": set(compute_dtypes)}
    known["exclude_vendors"] = known["vendor"]
    for i, o in enumerate(params.overrides):
        for field, choices in known.items():
            value = getattr(o, field)
            for v in value if isinstance(value, list) else [value]:
                if v is not None and v not in choices:
                    raise ModelError(f"{where}: overrides.{i}.{field} '{v}' matches nothing in the catalog "
                                     f"(known: {', '.join(sorted(choices))}){suggest(v, sorted(choices))}; "
                                     "fix the override or drop it")
    return params


def load_params(path: Path | str | None = None, catalog: Catalog | None = None) -> CalibrationParams:
    """Calibration parameters from ``path``; ``None`` = the shipped ``optimizer/models/data/calibration.yaml``.

    Falls back to the built-in defaults only when the shipped file is absent (a source
    checkout before the first calibration). With ``catalog``, a file's override selectors are checked
    against it (``check_selectors``).
    """
    if path is None:
        shipped = shipped_params_path()
        if not shipped.exists():
            return CalibrationParams()
        return parse_params(parse_yaml_text(shipped.read_text("utf-8"), f"built-in {PARAMS_FILE}", ModelError,
                                            shipped=True),
                            f"built-in {PARAMS_FILE}")
    if Path(path).suffix.lower() in (".csv", ".tsv"):  # a measurements file given as the fit read: 'not valid YAML'
        raise ModelError(f"{path}: is a {Path(path).suffix[1:].upper()} file, not calibration parameters; fit it first "
                         f"(`gpuplan calibrate {path} --out params.yaml`) and give --params the YAML it writes")
    data = read_yaml(path, "calibration parameters", ModelError)
    if "workloads" in data:  # 'name: unknown field; known fields: ...' did not say what the file was
        raise ModelError(f"{path}: is a plan file (it has workloads:), not calibration parameters; give --params "
                         "the YAML that `gpuplan calibrate` writes")
    params = parse_params(data, str(path))
    if catalog is not None:
        dtypes = {q.compute_dtype for q in catalog.precisions.values()}
        params = check_selectors(params, catalog.devices, dtypes, str(path))
    return params


def params_to_yaml(params: CalibrationParams, header: str = "") -> str:
    """YAML text of ``params`` (None fields dropped), with an optional comment header."""
    data = params.model_dump(mode="json", exclude_none=True)
    text = yaml.safe_dump(data, sort_keys=False, width=100)
    if header:
        text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + text
    return text
