"""Replica configurations of one model as aligned numpy arrays: what a replica holds and reaches.

Pure: no I/O, no printing. ``build_configs`` turns (device, precision, tp, pp) combos (with
an engine and an expert-parallel degree each) into a :class:`Configs`; the step rooflines in
``optimizer.models.perf`` evaluate all of them at once. Physics per ``DESIGN.md`` §1/§5
(t = tp, p = pp, e = ep, G = e·t·p GPUs; a replica with e > 1 runs attention data-parallel
over e ranks of t GPUs and splits the routed experts e ways, as TensorRT-LLM's "DEP" does):

- storage, KV and the memory fit: ``optimizer.models.memory_fit``; a checkpoint that quantizes
  only its routed experts (``Model.unquantized_dense``: gpt-oss) runs its dense GEMMs at the
  16-bit peak with the 16-bit GEMM efficiency (``dense_peak_flops``, ``dense_compute_efficiency``).
- link = interconnect_gb_s/2 per direction when the group fits in interconnect_domain_gpus,
  else the host link pcie_gb_s/2, times ``link_efficiency`` (``pcie_link_efficiency`` over the host link).
- efficiencies come from ``CalibrationParams.factors_for`` (device class, engine, GEMM dtype,
  weight-only quantization), looked up once per distinct combo (``optimizer.models.combo_lookup``);
  a GEMM dtype the calibration has no rows of reaches at most the achieved FLOPS of the next wider
  measured dtype on the device: ``peak_flops`` = min(peak, cap·e_w·peak_w/e)
  (``CalibrationParams.unmeasured_dtype_bound``, ``combo_lookup.unmeasured_dtype_flops``);
  :class:`StageConstants` folds them with the model's shapes (attention FLOPs:
  ``optimizer.models.attention``; MoE routing: ``optimizer.models.moe_routing``) into the
  per-stage factors the step functions multiply (computed once per Configs).

Units: bytes, seconds, FLOPs in arrays; ``_ms`` / ``_gb`` only where the name says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property

import numpy as np

from catalog.schema import Device, Model, Precision
from optimizer.models.attention import (
    attention_flops_per_context_token,
    decode_attention_flops_per_context_token,
)
from optimizer.models.combo_lookup import (
    engines_and_ep,
    factors_per_combo,
    gatherers,
    peaks,
    per_combo,
    unmeasured_dtype_flops,
)
from optimizer.models.lazy_subset import LazySubset
from optimizer.models.memory_fit import no_fit_reason, replica_memory
from optimizer.models.moe_routing import (
    COMBINE_BYTES_PER_ELEMENT,
    dispatch_bytes_per_element,
    ranks_receiving_token,
)
from optimizer.models.params import CalibrationParams, default_engine
from optimizer.models.speculative import SpeculativeCost


def config_key(device: Device, precision: Precision, tp: int, pp: int, engine: str | None = None,
               ep: int = 1) -> str:
    """Deterministic key in ``[a-z0-9_]`` with ``__`` separators, e.g. ``h100_sxm__fp8__tp4__pp1``;
    ``__ep8`` and ``__vllm`` are appended when the expert-parallel degree is > 1 or the engine is
    not the device's default."""
    dev = device.key.replace("-", "_").replace(".", "_")
    key = f"{dev}__{precision.key}__tp{tp}__pp{pp}"
    if ep > 1:
        key += f"__ep{ep}"
    if engine is not None and engine != default_engine(device):
        key += f"__{engine}"
    return key


@dataclass(frozen=True)
class Configs(LazySubset):
    """N replica configurations of one model as aligned arrays (index i = one config)."""

    keys: list[str]
    model: Model
    devices: list[Device]
    precisions: list[Precision]
    engines: list[str]
    tp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray  # attention data-parallel ranks = expert-parallel degree (1 = none)
    gpus: np.ndarray
    supported: np.ndarray  # the device computes in this precision
    fits: np.ndarray  # weights + workspace + at least one KV token fit
    runnable: np.ndarray  # supported & fits
    reason: list[str | None]
    # memory
    weight_bytes_total: np.ndarray  # stored bytes of one model copy
    weight_bytes_per_gpu: np.ndarray
    kv_bytes_per_token: np.ndarray  # whole model, all layers, in the KV dtype
    kv_shards: np.ndarray  # GPUs one token's KV is split over inside a stage
    usable_bytes_per_gpu: np.ndarray
    kv_capacity_tokens: np.ndarray  # tokens whose KV fits in the whole replica (<= 0: none)
    # speed (per GPU)
    memory_bandwidth_bytes_s: np.ndarray  # peak
    memory_bandwidth_efficiency: np.ndarray
    peak_flops: np.ndarray  # dense peak of the GEMM compute dtype, FLOP/s (NaN if unsupported); for an unmeasured
    # dtype held to its bound: cap·e_w·peak_w of the next wider measured dtype / e (unmeasured_dtype_flops)
    compute_efficiency: np.ndarray  # GEMMs, by device class, engine and GEMM dtype
    dense_peak_flops: np.ndarray  # peak of the non-expert GEMMs: peak_flops, or 16 bit (Model.unquantized_dense)
    dense_compute_efficiency: np.ndarray  # their efficiency: compute_efficiency, or that of 16-bit GEMMs
    attention_peak_flops: np.ndarray  # dense peak of the attention dtype, FLOP/s
    attention_efficiency: np.ndarray  # decode attention math
    prefill_attention_efficiency: float  # context (prefill) attention math, FMHA kernels
    moe_efficiency: np.ndarray  # share of compute_efficiency the routed-expert grouped GEMMs reach
    lm_head_peak_flops: np.ndarray  # 16-bit peak (the lm_head stays BF16)
    step_overhead_s: np.ndarray
    sequence_overhead_s: np.ndarray  # host time per running sequence per step (sampling, bookkeeping)
    batch_cap: np.ndarray  # cap on running sequences of the replica: ep x the per-rank cap (engine default or --max-batch)
    link_bytes_s: np.ndarray  # achieved per-direction all-reduce link bandwidth
    allreduce_latency_s: np.ndarray
    activation_bytes: np.ndarray
    dispatch_bytes: np.ndarray  # bytes per element of an all-gather MoE dispatch (moe_routing.dispatch_bytes_per_element)
    # model constants (bytes per parameter folded in)
    dense_weight_bytes: np.ndarray  # bytes read every step whatever the routing (body + lm_head)
    expert_weight_bytes: np.ndarray  # bytes of one routed expert over all MoE layers
    smooth_max_exponent: float
    moe_tile_tokens: float
    moe_glue_bytes_per_element: float  # CalibrationParams.moe_glue_bytes_per_element
    offline_whole_prompts: bool  # CalibrationParams.offline_whole_prompts (perf.offline_throughput_tokens_s)
    ep_allgather: bool  # CalibrationParams.ep_allgather: all-gather dispatch + BF16 reduce-scatter combine
    offline_prefill_chunk_tokens: float | None  # CalibrationParams.offline_prefill_chunk_tokens (perf.offline_step_s)
    alltoall_latency_s: np.ndarray  # per combo: alltoall_latency_us, or the link's all-reduce latency
    pp_hop_latency_s: float
    pp_microbatch_overhead_s: float
    request_overhead_s: float  # front-end time per request, added once to TTFT and E2E (not a step)
    kv_reserved_output_fraction: float  # share of the output whose KV a running sequence reserves
    speculative: SpeculativeCost | None = None  # decode steps verify k draft tokens (optimizer.models.speculative)

    def __len__(self) -> int:
        taken = self.__dict__.get("_taken")
        return len(taken[1]) if taken is not None else len(self.keys)

    def index(self, key: str) -> int:
        return self.keys.index(key)

    @cached_property
    def stage(self) -> StageConstants:
        """The step-independent factors of a pipeline-stage time, computed once per Configs."""
        return stage_constants(self)

    def take(self, indices: Sequence[int] | np.ndarray | slice) -> Configs:
        """The configurations at ``indices`` (in that order; a slice gives views), every aligned array sliced alike.

        Built without ``__init__`` (the searches take subsets thousands of times); the stage
        constants, when already folded, are sliced too (they are elementwise in the configurations).
        With indices, each aligned array or list is gathered when first read
        (``optimizer.models.lazy_subset``): a step time reads the stage constants only."""
        new = object.__new__(type(self))
        values = new.__dict__
        if isinstance(indices, slice):
            for name in _CONFIG_FIELDS:
                value = getattr(self, name)
                values[name] = value[indices] if isinstance(value, np.ndarray | list) else value
        else:
            source = self.__dict__.get("_taken", (self,))[0]
            for name in _CONFIG_FIELDS:
                value = source.__dict__[name]
                if not isinstance(value, np.ndarray | list):
                    values[name] = value
            self._mark_taken(new, np.asarray(indices, dtype=int))
        folded = self.__dict__.get("stage")
        if folded is not None:
            values["stage"] = folded.take(indices)
        return new

    def __getstate__(self) -> dict:
        """Every field gathered (a pickled subset does not carry the configurations it was taken from)."""
        state = self._gathered(_CONFIG_FIELDS)
        if "stage" in self.__dict__:
            state["stage"] = self.__dict__["stage"]
        return state


def build_configs(
    model: Model,
    combos: Sequence[tuple[Device, Precision, int, int]],
    params: CalibrationParams,
    engines: str | Sequence[str | None] | None = None,
    ep: int | Sequence[int] | None = None,
    max_batch: int | Sequence[int | None] | None = None,
) -> Configs:
    """Arrays for every (device, precision, tp, pp) combo; unrunnable ones keep a reason.

    ``engines``: serving engine per combo (None = ``default_engine`` of the device);
    ``ep``: expert-parallel degree per combo (attention data-parallel over ep ranks of tp GPUs;
    > 1 only for MoE models); ``max_batch``: scheduler cap on running sequences per combo and
    attention rank (None = the engine's ``max_batch_sequences``): the replica runs at most
    ep · cap sequences, as each attention data-parallel rank schedules its own batch
    (TensorRT-LLM's DeepSeek-R1 blog runs DEP8 at ``max_batch_size 384`` with
    ``--concurrency 3072`` = 8 · 384).
    """
    n = len(combos)
    devices = [d for d, _, _, _ in combos]
    precs = [q for _, q, _, _ in combos]
    tp = np.array([t for _, _, t, _ in combos], dtype=np.int64).reshape(n)
    pp = np.array([p for _, _, _, p in combos], dtype=np.int64).reshape(n)
    default_of = {d.key: default_engine(d) for d in {d.key: d for d in devices}.values()}
    eng, epa = engines_and_ep(model, devices, default_of, tp, pp, engines, ep)
    gpus = tp * pp * epa
    per_dev, per_prec = gatherers(devices, precs)
    peak_flops, attn_peak, why_unsupported = peaks(devices, precs)
    fac = factors_per_combo(devices, precs, eng, params)
    bound = unmeasured_dtype_flops(devices, precs, eng, params)  # NaN: the dtype is measured (or 16 bit)
    if not np.all(np.isnan(bound)):  # an unmeasured dtype: its GEMMs reach at most the wider dtype's FLOPS
        peak_flops = np.where(np.isnan(bound), peak_flops, bound / fac("compute_efficiency"))
    dense_peak, dense_eff = peak_flops, fac("compute_efficiency")
    if model.unquantized_dense:  # the non-expert GEMMs multiply 16-bit weights with 16-bit activations
        dense_peak = np.where(np.isnan(peak_flops), np.nan, per_dev(lambda d: d.peak_16bit_tflops) * 1e12)
        dense_eff = factors_per_combo(devices, precs, eng, params, compute_dtype="bf16")("compute_efficiency")
    batch_cap = fac("max_batch_sequences")
    if max_batch is not None:
        caps = per_combo(max_batch, n, "max_batch")
        batch_cap = np.array([b if c is None else float(c) for b, c in zip(batch_cap, caps, strict=True)], dtype=float)
    # the cap is per scheduler: each of the ep attention data-parallel ranks runs its own
    # (TensorRT-LLM max_batch_size, vLLM max_num_seqs per data-parallel engine)
    batch_cap = batch_cap * epa
    mem = replica_memory(model, params, tp, pp, epa, per_dev, per_prec)

    in_domain = gpus / pp <= per_dev(lambda d: d.interconnect_domain_gpus)
    allreduce_s = np.where(in_domain, params.allreduce_latency_us, params.pcie_allreduce_latency_us) / 1e6
    link = np.where(in_domain, per_dev(lambda d: d.interconnect_gb_s), per_dev(lambda d: d.pcie_gb_s))
    ebpp = per_prec(lambda q: q.embedding_bytes_per_param)
    lm_head = float(model.vocab_size) * model.hidden_size  # read every step (tied or not); the input embedding is a lookup
    reason = [why if why is not None or mem.fits[i] else no_fit_reason(model, params, d, q, tp[i], pp[i], epa[i],
                                                                          mem.weight_per_gpu[i], mem.usable[i])
              for i, (d, q, why) in enumerate(zip(devices, precs, why_unsupported, strict=True))]
    supported = ~np.isnan(peak_flops)
    return Configs(
        keys=_keys(combos, eng, epa, default_of),
        model=model, devices=devices, precisions=precs, engines=eng,
        tp=tp, pp=pp, ep=epa, gpus=gpus,
        supported=supported, fits=mem.fits, runnable=supported & mem.fits, reason=reason,
        weight_bytes_total=mem.weight_total, weight_bytes_per_gpu=mem.weight_per_gpu,
        kv_bytes_per_token=mem.kv_bpt, kv_shards=mem.kv_shards,
        usable_bytes_per_gpu=mem.usable, kv_capacity_tokens=np.maximum(mem.kv_capacity, 0.0),
        memory_bandwidth_bytes_s=per_dev(lambda d: d.memory_bandwidth_tb_s) * 1e12,
        memory_bandwidth_efficiency=fac("memory_bandwidth_efficiency"),
        peak_flops=peak_flops, compute_efficiency=fac("compute_efficiency"),
        dense_peak_flops=dense_peak, dense_compute_efficiency=dense_eff,
        attention_peak_flops=attn_peak, attention_efficiency=fac("attention_efficiency"),
        moe_efficiency=fac("moe_efficiency"),
        prefill_attention_efficiency=float(params.prefill_attention_efficiency or params.attention_efficiency),
        lm_head_peak_flops=per_dev(lambda d: d.peak_16bit_tflops) * 1e12,
        step_overhead_s=fac("step_overhead_ms") / 1e3, sequence_overhead_s=fac("sequence_overhead_us") / 1e6,
        batch_cap=batch_cap,
        link_bytes_s=link / 2 * 1e9 * np.where(in_domain, params.link_efficiency,
                                               params.pcie_link_efficiency or params.link_efficiency),
        allreduce_latency_s=allreduce_s,
        activation_bytes=per_prec(lambda q: q.activation_bytes),
        dispatch_bytes=per_prec(lambda q: dispatch_bytes_per_element(q.compute_dtype, q.weight_only,
                                                                     q.weight_bytes_per_param)),
        dense_weight_bytes=mem.body_dense * mem.dbpp + lm_head * ebpp,  # the vision tower is held, not read
        expert_weight_bytes=(model.params_per_expert if model.is_moe else 0.0) * mem.wbpp,
        smooth_max_exponent=float(params.smooth_max_exponent), moe_tile_tokens=float(params.moe_tile_tokens),
        moe_glue_bytes_per_element=float(params.moe_glue_bytes_per_element),
        offline_whole_prompts=params.offline_whole_prompts, ep_allgather=params.ep_allgather,
        offline_prefill_chunk_tokens=params.offline_prefill_chunk_tokens,
        alltoall_latency_s=_alltoall_latency_s(fac, allreduce_s),
        pp_hop_latency_s=params.pp_hop_latency_us / 1e6,
        pp_microbatch_overhead_s=params.pp_microbatch_overhead_us / 1e6,
        request_overhead_s=params.request_overhead_ms / 1e3,
        kv_reserved_output_fraction=params.kv_reserved_output_fraction,
    )


def _alltoall_latency_s(fac, allreduce_latency_s: np.ndarray) -> np.ndarray:
    """Start-up time (s) of one all-to-all per combo: the class's ``alltoall_latency_us`` where the
    parameters give one, else ``allreduce_latency_s``, that of an all-reduce over the same link (NVLink or host PCIe)."""
    own_us = fac("alltoall_latency_us")  # NaN where None
    return np.where(np.isnan(own_us), allreduce_latency_s, own_us / 1e6)


def _keys(combos, engines: list[str], ep: np.ndarray, default_of: dict[str, str]) -> list[str]:
    """``config_key`` of every combo (the device part computed once per device)."""
    dev = {k: k.replace("-", "_").replace(".", "_") for k in default_of}
    out = []
    for (d, q, t, p), e, x in zip(combos, engines, ep.tolist(), strict=True):
        key = f"{dev[d.key]}__{q.key}__tp{t}__pp{p}"
        if x > 1:
            key += f"__ep{x}"
        if e != default_of[d.key]:
            key += f"__{e}"
        out.append(key)
    return out


def column(a: np.ndarray, ndim: int) -> np.ndarray:
    """Config array (N,) shaped to broadcast against (N, K, ...) inputs."""
    return a.reshape((-1,) + (1,) * (ndim - 1))


@dataclass(frozen=True)
class StageConstants:
    """The factors of a pipeline-stage time that depend on the configuration only: arrays (N,),
    or (N, 1, ...) columns from ``shaped``.

    Folded once per :class:`Configs` (``Configs.stage``): the step-time functions are called
    many times on the same configurations and then only do the per-step arithmetic.
    """

    pp: np.ndarray  # p, as float
    ep: np.ndarray  # e, as float (attention data-parallel ranks)
    gpus: np.ndarray  # e·t·p, as float
    tp_pp: np.ndarray  # t·p: GPUs one attention rank's weights are spread over
    weight_bytes_per_gpu: np.ndarray  # stored
    dense_read_per_gpu: np.ndarray  # dense body + lm_head bytes read per step per GPU
    expert_read_per_gpu: np.ndarray  # bytes of one routed expert per GPU that holds it: expert/(t·p)
    kv_read_per_ctx_token: np.ndarray  # KV bytes per GPU per (sequence × context token) of its rank
    memory_bytes_s: np.ndarray  # achieved memory bandwidth per GPU, bw·eff_bw
    gemm_flops_s: np.ndarray  # achieved dense (non-expert) GEMM compute per GPU, peak·eff_flops (NaN if unsupported)
    moe_flops_s: np.ndarray  # achieved grouped-GEMM compute per GPU, peak·eff_flops·eff_moe
    gemm_flops_per_token: np.ndarray  # 2·active dense body params / G (attention, shared experts, dense FFNs)
    expert_flops_per_token: np.ndarray  # 2·k·params per expert / G (routed experts)
    moe_glue_bytes_per_token: np.ndarray  # MoE layers/p · k · hidden · glue bytes / e: routing glue per GPU
    lm_head_s_per_sequence: np.ndarray  # 2·vocab·hidden/(e·t) / (16-bit peak·eff_flops)
    attn_s_per_ctx_token: np.ndarray  # decode: attention FLOPs per context token / G / (attention peak·e_attn)
    prefill_attn_s_per_ctx_token: np.ndarray  # prefill: the same with the prefill FLOPs and efficiency
    allreduces: np.ndarray  # all-reduces per stage pass, layers/p · 2 (0 at t = 1)
    ring_factor: np.ndarray  # 2·(t−1)/t: share of the bytes each GPU sends in a ring all-reduce
    alltoalls: np.ndarray  # all-to-alls per stage pass, moe_layers/p · 2 (0 at e = 1)
    a2a_factor: np.ndarray  # ranks one token is sent to (``ranks_receiving_token``) · hidden · bytes per element / e
    activation_bytes: np.ndarray
    link_bytes_s: np.ndarray
    allreduce_latency_s: np.ndarray
    alltoall_latency_s: np.ndarray
    hop_s_fixed: np.ndarray  # pipeline hop latency (0 at p = 1)
    hop_on: np.ndarray  # p > 1
    step_overhead_s: np.ndarray  # fixed host time per step incl. p·microbatch overhead when p > 1
    sequence_overhead_s: np.ndarray  # host time per running sequence per step, / e ranks
    _shaped: dict[int, StageConstants] = field(default_factory=dict, repr=False, compare=False)

    def take(self, idx: np.ndarray | slice) -> StageConstants:
        """The constants of the configurations at ``idx`` (of the (N,) arrays)."""
        return StageConstants(*(getattr(self, name)[idx] for name in _STAGE_FIELDS))

    def shaped(self, ndim: int) -> StageConstants:
        """The constants as (N, 1, ...) columns that broadcast against ``ndim``-dimensional inputs (cached)."""
        if ndim <= 1:
            return self
        if ndim not in self._shaped:
            self._shaped[ndim] = StageConstants(
                *(column(getattr(self, name), ndim) for name in _STAGE_FIELDS))
        return self._shaped[ndim]


_CONFIG_FIELDS = tuple(f.name for f in fields(Configs))  # what ``Configs.take`` copies
Configs._LAZY_FIELDS = frozenset(_CONFIG_FIELDS)  # gathered on first read in a subset (``take``)
_STAGE_FIELDS = tuple(f.name for f in fields(StageConstants) if f.name != "_shaped")  # the (N,) arrays


def stage_constants(c: Configs) -> StageConstants:
    """The :class:`StageConstants` of every configuration of ``c``."""
    m = c.model
    p = c.pp.astype(float)
    t = c.tp.astype(float)
    e = c.ep.astype(float)
    gpus = t * p * e
    routed_active = m.experts_per_token * m.params_per_expert if m.is_moe else 0.0
    body_active = max(m.active_params_b * 1e9 - m.embedding_params - routed_active, 0.0)
    lm_head = m.vocab_size * m.hidden_size
    hidden_act = m.hidden_size * c.activation_bytes
    return StageConstants(
        pp=p, ep=e, gpus=gpus, tp_pp=t * p, weight_bytes_per_gpu=c.weight_bytes_per_gpu,
        dense_read_per_gpu=c.dense_weight_bytes / (t * p), expert_read_per_gpu=c.expert_weight_bytes / (t * p),
        kv_read_per_ctx_token=c.kv_bytes_per_token / (c.kv_shards * p * e),
        memory_bytes_s=c.memory_bandwidth_bytes_s * c.memory_bandwidth_efficiency,
        gemm_flops_s=c.dense_peak_flops * c.dense_compute_efficiency,
        moe_flops_s=c.peak_flops * c.compute_efficiency * c.moe_efficiency,
        gemm_flops_per_token=2.0 * body_active / gpus, expert_flops_per_token=2.0 * routed_active / gpus,
        moe_glue_bytes_per_token=np.full_like(p, (m.moe_layers * m.experts_per_token * m.hidden_size if m.is_moe else 0.0)
                                              * c.moe_glue_bytes_per_element) / (p * e),
        lm_head_s_per_sequence=2.0 * lm_head / (t * e * p) / (c.lm_head_peak_flops * c.compute_efficiency),
        attn_s_per_ctx_token=decode_attention_flops_per_context_token(m) / gpus
        / (c.attention_peak_flops * c.attention_efficiency),
        prefill_attn_s_per_ctx_token=attention_flops_per_context_token(m) / gpus
        / (c.attention_peak_flops * c.prefill_attention_efficiency),
        allreduces=np.where(t > 1, m.num_layers / p * 2.0, 0.0), ring_factor=2.0 * (t - 1.0) / t * hidden_act / e,
        alltoalls=np.where(e > 1, m.moe_layers / p * 2.0, 0.0),
        a2a_factor=ranks_receiving_token(m.num_experts, m.experts_per_token, e, c.ep_allgather)
        * _a2a_hidden_bytes(c, hidden_act) / e,
        activation_bytes=c.activation_bytes, link_bytes_s=c.link_bytes_s, allreduce_latency_s=c.allreduce_latency_s,
        alltoall_latency_s=c.alltoall_latency_s,
        hop_s_fixed=np.where(p > 1, c.pp_hop_latency_s, 0.0), hop_on=(p > 1).astype(float) * hidden_act,
        step_overhead_s=c.step_overhead_s + np.where(p > 1, p * c.pp_microbatch_overhead_s, 0.0),
        sequence_overhead_s=c.sequence_overhead_s / e,
    )


def _a2a_hidden_bytes(c: Configs, hidden_act: np.ndarray) -> np.ndarray:
    """Bytes of one token's hidden state in one all-to-all, the mean of dispatch and combine (the
    step counts 2 per MoE layer): ``hidden_act`` (hidden·act) both ways, or with ``ep_allgather``
    hidden·(dispatch bytes + 2 B BF16 combine)/2 (FP8: 1.5 B, NVFP4: 1.28 B, 16 bit: 2 B per element)."""
    if not c.ep_allgather:
        return hidden_act
    return c.model.hidden_size * (c.dispatch_bytes + COMBINE_BYTES_PER_ELEMENT) / 2.0
