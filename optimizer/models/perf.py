"""Performance model of one replica (one model copy on tp·pp devices), vectorised.

Pure: no I/O, no printing. ``build_configs`` turns (device, precision, tp, pp) combos into
aligned numpy arrays (:class:`Configs`); every other function evaluates all of them at
once. Physics per ``DESIGN.md`` §1/§5 (t = tp, p = pp, W = weight bytes of the model):

- weights per GPU = W/(t·p); MoE: bytes read per step = (dense params + experts touched ·
  params per expert) · bytes/param, experts touched per layer E·(1 − (1 − k/E)^B) for B
  tokens in the step; compute always on active params.
- KV bytes per token = 2 · layers · kv_heads · head_dim · kv dtype bytes (MLA: latent).
  With TP the KV heads are split over min(t, kv_heads) GPUs (replicated beyond that; an
  MLA latent is replicated on every TP rank); with PP each stage holds layers/p.
- memory fit: W/(t·p) + workspace + KV ≤ usable fraction · memory (GiB).
- a decode step: the batch b is split into p micro-batches that occupy the p stages at
  once (pipeline stages *in parallel* for throughput, *in series* for latency). One stage
  time for a micro-batch of b/p sequences and n/p prefill tokens is
  ``max(t_mem, t_compute) + t_comm`` with
  ``t_mem = (weights/(t·p) + (b/p)·c·kv/(kv_shards·p)) / (bw · eff_bw)``,
  ``t_compute = (2·active·(b+n)/p + attention) / (t·p) / (peak · eff_flops)``,
  ``t_comm = layers/p · 2 · (2·(t−1)/t · tokens·hidden·act_bytes / link + latency)``;
  the step (every sequence advances one token) = ``p · stage + overhead`` with
  overhead = step_overhead + b · sequence_overhead (host work per running sequence). For
  p = 1 this is exactly ``max(t_mem, t_compute) + t_comm + t_overhead``. Stage-to-stage
  activation transfers are neglected.
- link = interconnect_gb_s/2 per direction when t ≤ interconnect_domain_gpus, else the
  host link pcie_gb_s/2, times ``link_efficiency``.

Units: bytes, seconds, FLOPs in arrays; ``_ms`` / ``_gb`` only where the name says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property

import numpy as np

from catalog.schema import Device, Model, Precision
from optimizer.models.params import CalibrationParams
from optimizer.models.speculative import SpeculativeCost

GIB_BYTES = 2.0**30
ATTENTION_FLOPS_PER_QK_ELEMENT = 4.0  # QK^T and A·V: 2 matmuls x 2 FLOPs per multiply-add


def config_key(device: Device, precision: Precision, tp: int, pp: int) -> str:
    """Deterministic key in ``[a-z0-9_]`` with ``__`` separators, e.g. ``h100_sxm__fp8__tp4__pp1``."""
    dev = device.key.replace("-", "_").replace(".", "_")
    return f"{dev}__{precision.key}__tp{tp}__pp{pp}"


@dataclass(frozen=True)
class Configs:
    """N replica configurations of one model as aligned arrays (index i = one config)."""

    keys: list[str]
    model: Model
    devices: list[Device]
    precisions: list[Precision]
    tp: np.ndarray
    pp: np.ndarray
    gpus: np.ndarray
    supported: np.ndarray  # the device computes in this precision
    fits: np.ndarray  # weights + workspace + at least one KV token fit
    runnable: np.ndarray  # supported & fits
    reason: list[str | None]
    # memory
    weight_bytes_total: np.ndarray
    weight_bytes_per_gpu: np.ndarray
    kv_bytes_per_token: np.ndarray  # whole model, all layers, in the KV dtype
    kv_shards: np.ndarray  # GPUs one token's KV is split over inside a stage
    usable_bytes_per_gpu: np.ndarray
    kv_capacity_tokens: np.ndarray  # tokens whose KV fits in the whole replica (<= 0: none)
    # speed (per GPU)
    memory_bandwidth_bytes_s: np.ndarray  # peak
    memory_bandwidth_efficiency: np.ndarray
    peak_flops: np.ndarray  # dense peak of the compute dtype, FLOP/s (NaN if unsupported)
    compute_efficiency: np.ndarray
    step_overhead_s: np.ndarray
    link_bytes_s: np.ndarray  # achieved per-direction all-reduce link bandwidth
    allreduce_latency_s: np.ndarray
    activation_bytes: np.ndarray
    # model constants (bytes per parameter folded in)
    dense_weight_bytes: np.ndarray  # bytes read every step whatever the routing
    expert_weight_bytes: np.ndarray  # bytes of one routed expert over all MoE layers
    sequence_overhead_s: float  # host time per running sequence per step (sampling, bookkeeping)
    request_overhead_s: float  # front-end time per request, added once to TTFT and E2E (not a step)
    max_batch_sequences: int  # scheduler cap on running sequences (offline runs)
    kv_reserved_output_fraction: float  # share of the output whose KV a running sequence reserves
    speculative: SpeculativeCost | None = None  # decode steps verify k draft tokens (optimizer.models.speculative)

    def __len__(self) -> int:
        return len(self.keys)

    def index(self, key: str) -> int:
        return self.keys.index(key)

    @cached_property
    def stage(self) -> StageConstants:
        """The step-independent factors of a pipeline-stage time, computed once per Configs."""
        return stage_constants(self)

    def take(self, indices: Sequence[int] | np.ndarray | slice) -> Configs:
        """The configurations at ``indices`` (in that order; a slice gives views), every aligned array sliced alike."""
        idx = indices if isinstance(indices, slice) else np.asarray(indices, dtype=int)
        changes = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                changes[f.name] = value[idx]
            elif isinstance(value, list):
                changes[f.name] = value[idx] if isinstance(idx, slice) else [value[i] for i in idx]
        return replace(self, **changes)


def build_configs(
    model: Model,
    combos: Sequence[tuple[Device, Precision, int, int]],
    params: CalibrationParams,
) -> Configs:
    """Arrays for every (device, precision, tp, pp) combo; unrunnable ones keep a reason."""
    n = len(combos)
    devices = [d for d, _, _, _ in combos]
    precs = [q for _, q, _, _ in combos]
    tp = np.array([t for _, _, t, _ in combos], dtype=np.int64).reshape(n)
    pp = np.array([p for _, _, _, p in combos], dtype=np.int64).reshape(n)
    if n and (tp.min() < 1 or pp.min() < 1):
        from catalog.errors import ModelError

        raise ModelError(f"tp and pp must be >= 1 (got tp {tp.min()}, pp {pp.min()})")
    gpus = tp * pp

    # Per-device and per-precision lookups are done once per distinct object, then gathered.
    dev_keys = sorted({d.key for d in devices})
    dev_by_key = {d.key: d for d in devices}
    dev_idx = np.array([dev_keys.index(d.key) for d in devices], dtype=np.int64) if n else np.zeros(0, int)
    prec_keys = sorted({q.key for q in precs})
    prec_by_key = {q.key: q for q in precs}
    prec_idx = np.array([prec_keys.index(q.key) for q in precs], dtype=np.int64) if n else np.zeros(0, int)

    def per_dev(f) -> np.ndarray:
        return np.array([f(dev_by_key[k]) for k in dev_keys], dtype=float)[dev_idx] if n else np.zeros(0)

    def per_prec(f) -> np.ndarray:
        return np.array([f(prec_by_key[k]) for k in prec_keys], dtype=float)[prec_idx] if n else np.zeros(0)

    pair_peak: dict[tuple[str, str], float] = {}
    pair_reason: dict[tuple[str, str], str | None] = {}
    for d in dev_by_key.values():
        for q in prec_by_key.values():
            peak = q.compute_peak_tflops(d)
            pair_peak[(d.key, q.key)] = np.nan if peak is None else peak * 1e12
            pair_reason[(d.key, q.key)] = q.unsupported_reason(d)
    peak_flops = np.array([pair_peak[(d.key, q.key)] for d, q in zip(devices, precs, strict=True)], dtype=float)
    supported = ~np.isnan(peak_flops)

    factors = {k: params.factors_for(dev_by_key[k]) for k in dev_keys}
    eff_bw = per_dev(lambda d: factors[d.key].memory_bandwidth_efficiency)
    eff_fl = per_dev(lambda d: factors[d.key].compute_efficiency)
    overhead_s = per_dev(lambda d: factors[d.key].step_overhead_ms) / 1e3

    wbpp = per_prec(lambda q: q.weight_bytes_per_param)
    weight_total = model.total_params_b * 1e9 * wbpp
    weight_per_gpu = weight_total / gpus
    kv_bpt = per_prec(lambda q: model.kv_bytes_per_token(q.kv_bytes_per_element))
    kv_shards = np.ones(n) if model.is_mla else np.minimum(tp, model.num_kv_heads).astype(float)
    kv_per_token_per_gpu = kv_bpt / (kv_shards * pp)

    usable = per_dev(lambda d: d.memory_gb) * GIB_BYTES * params.memory_usable_fraction
    free = usable - weight_per_gpu - params.workspace_gb_per_gpu * GIB_BYTES
    kv_capacity = free / kv_per_token_per_gpu
    fits = kv_capacity >= 1.0

    in_domain = tp <= per_dev(lambda d: d.interconnect_domain_gpus)
    link = np.where(in_domain, per_dev(lambda d: d.interconnect_gb_s), per_dev(lambda d: d.pcie_gb_s))
    link_bytes_s = link / 2 * 1e9 * params.link_efficiency
    latency_s = np.where(in_domain, params.allreduce_latency_us, params.pcie_allreduce_latency_us) / 1e6

    reason: list[str | None] = []
    for i, (d, q) in enumerate(zip(devices, precs, strict=True)):
        why = pair_reason[(d.key, q.key)]
        if why is None and not fits[i]:
            ws = params.workspace_gb_per_gpu * GIB_BYTES
            why = (f"{model.key} in {q.key} needs {weight_per_gpu[i] / 1e9:.1f} GB of weights per GPU "
                   f"+ {ws / 1e9:.1f} GB workspace at tp{tp[i]}·pp{pp[i]}; {d.key} has {usable[i] / 1e9:.1f} GB "
                   f"usable ({params.memory_usable_fraction:.0%} of {d.memory_gb:g} GiB); "
                   "raise tp/pp or use a smaller precision")
        reason.append(why)

    ppe = model.params_per_expert if model.is_moe else 0.0
    dense = model.dense_params if model.is_moe else model.total_params_b * 1e9
    return Configs(
        keys=[config_key(d, q, int(t), int(p)) for (d, q, t, p) in combos],
        model=model, devices=devices, precisions=precs,
        tp=tp, pp=pp, gpus=gpus,
        supported=supported, fits=fits, runnable=supported & fits, reason=reason,
        weight_bytes_total=weight_total, weight_bytes_per_gpu=weight_per_gpu,
        kv_bytes_per_token=kv_bpt, kv_shards=kv_shards,
        usable_bytes_per_gpu=usable, kv_capacity_tokens=np.maximum(kv_capacity, 0.0),
        memory_bandwidth_bytes_s=per_dev(lambda d: d.memory_bandwidth_tb_s) * 1e12,
        memory_bandwidth_efficiency=eff_bw,
        peak_flops=peak_flops, compute_efficiency=eff_fl, step_overhead_s=overhead_s,
        link_bytes_s=link_bytes_s, allreduce_latency_s=latency_s,
        activation_bytes=per_prec(lambda q: q.activation_bytes),
        dense_weight_bytes=dense * wbpp, expert_weight_bytes=ppe * wbpp,
        sequence_overhead_s=params.sequence_overhead_us / 1e6,
        request_overhead_s=params.request_overhead_ms / 1e3,
        max_batch_sequences=params.max_batch_sequences,
        kv_reserved_output_fraction=params.kv_reserved_output_fraction,
    )


# ---------------------------------------------------------------------------------------
# Building blocks (all broadcast: config arrays are reshaped to (N, 1, ...) as needed)


def _prep(c: Configs, *xs) -> tuple[int, list[np.ndarray]]:
    arrs = [np.asarray(x, dtype=float) for x in xs]
    ndim = max([1] + [a.ndim for a in arrs])
    return ndim, arrs


def _col(a: np.ndarray, ndim: int) -> np.ndarray:
    """Config array (N,) shaped to broadcast against (N, K, ...) inputs."""
    return a.reshape((-1,) + (1,) * (ndim - 1))


def experts_touched(num_experts: int, experts_per_token: int, tokens) -> np.ndarray:
    """Expected distinct experts per MoE layer for ``tokens`` routed tokens: E·(1 − (1 − k/E)^B)."""
    tokens = np.asarray(tokens, dtype=float)
    if num_experts <= 0:
        return np.zeros_like(tokens)
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** np.maximum(tokens, 0.0))


@dataclass(frozen=True)
class StageConstants:
    """The factors of a pipeline-stage time that depend on the configuration only: arrays (N,),
    or (N, 1, ...) columns from ``shaped``.

    Folded once per :class:`Configs` (``Configs.stage``): the step-time functions are called
    many times on the same configurations and then only do the per-step arithmetic.
    """

    pp: np.ndarray  # p, as float
    gpus: np.ndarray  # t·p, as float
    weight_bytes_total: np.ndarray
    weight_bytes_per_gpu: np.ndarray
    dense_weight_bytes: np.ndarray
    expert_weight_bytes: np.ndarray
    kv_bytes_per_token: np.ndarray
    kv_gpus: np.ndarray  # kv_shards·p: GPUs one token's KV is spread over
    memory_bytes_s: np.ndarray  # achieved memory bandwidth per GPU, bw·eff_bw
    flops_s: np.ndarray  # achieved compute per GPU, peak·eff_flops (NaN if unsupported)
    allreduces: np.ndarray  # all-reduces per stage pass, layers/p · 2
    ring_factor: np.ndarray  # 2·(t−1)/t: share of the bytes each GPU sends in a ring all-reduce
    multi_gpu: np.ndarray  # t > 1 (no all-reduce otherwise)
    activation_bytes: np.ndarray
    link_bytes_s: np.ndarray
    allreduce_latency_s: np.ndarray
    step_overhead_s: np.ndarray
    _shaped: dict[int, StageConstants] = field(default_factory=dict, repr=False, compare=False)

    def shaped(self, ndim: int) -> StageConstants:
        """The constants as (N, 1, ...) columns that broadcast against ``ndim``-dimensional inputs (cached)."""
        if ndim <= 1:
            return self
        if ndim not in self._shaped:
            self._shaped[ndim] = StageConstants(
                *(_col(getattr(self, f.name), ndim) for f in fields(self) if f.name != "_shaped"))
        return self._shaped[ndim]


def stage_constants(c: Configs) -> StageConstants:
    """The :class:`StageConstants` of every configuration of ``c``."""
    p = c.pp.astype(float)
    t = c.tp.astype(float)
    return StageConstants(
        pp=p, gpus=t * p, weight_bytes_total=c.weight_bytes_total, weight_bytes_per_gpu=c.weight_bytes_per_gpu,
        dense_weight_bytes=c.dense_weight_bytes, expert_weight_bytes=c.expert_weight_bytes,
        kv_bytes_per_token=c.kv_bytes_per_token, kv_gpus=c.kv_shards * p,
        memory_bytes_s=c.memory_bandwidth_bytes_s * c.memory_bandwidth_efficiency,
        flops_s=c.peak_flops * c.compute_efficiency,
        allreduces=(c.model.num_layers / p) * 2.0, ring_factor=2.0 * (t - 1.0) / t, multi_gpu=t > 1,
        activation_bytes=c.activation_bytes, link_bytes_s=c.link_bytes_s, allreduce_latency_s=c.allreduce_latency_s,
        step_overhead_s=c.step_overhead_s,
    )


def _weight_bytes_read(c: Configs, tokens: np.ndarray, ndim: int) -> np.ndarray:
    """Weight bytes the whole replica reads for one pass of ``tokens`` tokens (MoE-aware)."""
    m, k = c.model, c.stage.shaped(ndim)
    if not m.is_moe:
        return k.weight_bytes_total + 0.0 * tokens
    touched = experts_touched(m.num_experts, m.experts_per_token, np.maximum(tokens, 1.0))
    return k.dense_weight_bytes + touched * k.expert_weight_bytes


def _weight_bytes_read_per_gpu(c: Configs, tokens: np.ndarray, ndim: int) -> np.ndarray:
    """``_weight_bytes_read``/(t·p); for a dense model the (N, 1, ...) column W/(t·p), whatever ``tokens``."""
    if not c.model.is_moe:
        return c.stage.shaped(ndim).weight_bytes_per_gpu
    return _weight_bytes_read(c, tokens, ndim) / c.stage.shaped(ndim).gpus


def attention_flops_per_context_token(model: Model) -> float:
    """FLOPs of attention for one query token per token of context, all layers: 4·layers·heads·head_dim."""
    return ATTENTION_FLOPS_PER_QK_ELEMENT * model.num_layers * model.num_attention_heads * model.head_dim


def _allreduce_s(c: Configs, tokens: np.ndarray, ndim: int) -> np.ndarray:
    """One ring all-reduce of ``tokens``·hidden activations: 2·(t−1)/t · bytes / link + latency (0 at t=1)."""
    k = c.stage.shaped(ndim)
    nbytes = tokens * c.model.hidden_size * k.activation_bytes
    time = k.ring_factor * nbytes / k.link_bytes_s + k.allreduce_latency_s
    return np.where(k.multi_gpu, time, 0.0)


@dataclass(frozen=True)
class StepParts:
    """Components of one pipeline-stage time (seconds), and the full step time."""

    mem_s: np.ndarray
    compute_s: np.ndarray
    comm_s: np.ndarray
    step_s: np.ndarray


def _decode_step(c: Configs, batch, context_tokens, prefill_tokens, prefill_context_tokens) -> StepParts:
    """``decode_parts``, each part at its own broadcast shape: terms that do not depend on the
    prefill tokens stay as small as the batch (N, 1, ...), so (N, K, ...) prefill grids cost less."""
    ndim, (b, ctx, npre, pctx) = _prep(c, batch, context_tokens, prefill_tokens, prefill_context_tokens)
    k = c.stage.shaped(ndim)
    micro_b = b / k.pp
    micro_n = npre / k.pp
    tokens = micro_b + micro_n
    spec = c.speculative
    verify = micro_b * spec.draft_tokens if spec is not None else 0.0  # draft tokens checked in the same pass
    if spec is not None:
        tokens = tokens + verify
    decode_ctx = micro_b * ctx  # context tokens the decoding micro-batch attends to
    weights = _weight_bytes_read_per_gpu(c, tokens, ndim)
    mem_s = (weights + decode_ctx * k.kv_bytes_per_token / k.kv_gpus) / k.memory_bytes_s
    active = c.model.active_params_b * 1e9
    attn = attention_flops_per_context_token(c.model) * (decode_ctx + micro_n * pctx)
    if spec is not None:
        attn = attn + attention_flops_per_context_token(c.model) * verify * ctx
    compute_s = (2.0 * active * tokens + attn) / k.gpus / k.flops_s
    comm_s = k.allreduces * _allreduce_s(c, tokens, ndim)
    overhead_s = k.step_overhead_s + b * c.sequence_overhead_s
    step_s = k.pp * (np.maximum(mem_s, compute_s) + comm_s) + overhead_s
    if spec is not None:
        step_s = step_s + draft_s(c, b, ctx, ndim)
    return StepParts(mem_s, compute_s, comm_s, step_s)


def draft_s(c: Configs, batch, context_tokens, ndim: int = 1) -> np.ndarray:
    """Time (s) of the k draft passes of a speculative step (0 without ``c.speculative``).

    Each pass is a roofline over the replica's t·p GPUs for the whole batch b at context c:
    ``max((f·W(b) + P_x·β)/(t·p)/bw + b·c·kv·(f + r_x)/kv_gpus/bw, 2·(f·active + P_a)·b/(t·p)/flops)``
    with β the configuration's weight bytes per parameter (``optimizer.models.speculative``).
    """
    spec = c.speculative
    if spec is None:
        return np.zeros(np.shape(batch))
    k = c.stage.shaped(ndim)
    b = np.asarray(batch, dtype=float)
    bytes_per_param = k.weight_bytes_total / (c.model.total_params_b * 1e9)
    weights = spec.layer_fraction * _weight_bytes_read(c, np.maximum(b, 1.0), ndim) \
        + spec.extra_weight_params * bytes_per_param
    kv = b * context_tokens * k.kv_bytes_per_token * (spec.layer_fraction + spec.extra_kv_ratio) / k.kv_gpus
    mem_s = (weights / k.gpus + kv) / k.memory_bytes_s
    flops = 2.0 * (spec.layer_fraction * c.model.active_params_b * 1e9 + spec.extra_active_params) * b
    return spec.draft_tokens * np.maximum(mem_s, flops / k.gpus / k.flops_s)


def decode_parts(c: Configs, batch, context_tokens, prefill_tokens=0.0,
                 prefill_context_tokens=0.0) -> StepParts:
    """Stage times and step time of a decode step (see module docstring for the formulas),
    all four of the same (broadcast) shape.

    ``prefill_context_tokens`` is the mean context (attention span) of the prefill tokens;
    a prompt of length L processed whole has mean span L/2.
    """
    parts = _decode_step(c, batch, context_tokens, prefill_tokens, prefill_context_tokens)
    shape = parts.step_s.shape
    return StepParts(*(np.broadcast_to(x, shape) for x in (parts.mem_s, parts.compute_s, parts.comm_s)),
                     parts.step_s)


def decode_step_s(c: Configs, batch, context_tokens, prefill_tokens=0.0,
                  prefill_context_tokens=0.0) -> np.ndarray:
    """Wall time (s) of one scheduler step in which each of ``batch`` running sequences
    (mean context ``context_tokens``) advances one token and ``prefill_tokens`` prompt
    tokens are processed (chunked prefill).

    ``= pp · (max(t_mem, t_compute) + t_comm) + t_overhead`` with per-stage micro-batches
    of batch/pp (see module docstring). Broadcasts against (N,) or (N, K) inputs; NaN where
    the device cannot compute in the precision.
    """
    return _decode_step(c, batch, context_tokens, prefill_tokens, prefill_context_tokens).step_s


def tpot_s(c: Configs, batch, context_tokens) -> np.ndarray:
    """Time per output token (s) of every sequence at ``batch`` = one decode step."""
    return decode_step_s(c, batch, context_tokens)


def bound_kind(c: Configs, batch, context_tokens) -> np.ndarray:
    """'memory', 'compute' or 'communication': the largest term of a decode stage."""
    parts = decode_parts(c, batch, context_tokens)
    mem, comp, comm = np.broadcast_arrays(parts.mem_s, parts.compute_s, parts.comm_s)
    out = np.where(comp > mem, "compute", "memory").astype(object)
    out = np.where(comm > np.maximum(mem, comp), "communication", out)
    return out.astype(str)


def prefill_s(c: Configs, prompt_tokens, batch_prompts=1) -> np.ndarray:
    """Time (s) to prefill ``batch_prompts`` prompts of ``prompt_tokens`` tokens each, in one pass.

    FLOPs = 2·active·L·n + 2·layers·heads·head_dim·L²·n (causal attention: span L/2 per
    token, 4 FLOPs per element); the pass goes through the pp stages in series:
    ``pp · (max(weights/(t·p)/bw, FLOPs/(t·p)/flops) + t_comm) + t_overhead``.
    """
    ndim, (L, n) = _prep(c, prompt_tokens, batch_prompts)
    k = c.stage.shaped(ndim)
    tokens = L * n
    mem_s = _weight_bytes_read_per_gpu(c, tokens, ndim) / k.memory_bytes_s
    attn = attention_flops_per_context_token(c.model) * tokens * L / 2.0
    compute_s = (2.0 * c.model.active_params_b * 1e9 * tokens + attn) / k.gpus / k.flops_s
    comm_s = k.allreduces * _allreduce_s(c, tokens, ndim)
    return k.pp * (np.maximum(mem_s, compute_s) + comm_s) + k.step_overhead_s


def max_sequences(c: Configs, tokens_per_sequence) -> np.ndarray:
    """Sequences of ``tokens_per_sequence`` tokens whose KV fits in the replica (floor, >= 0)."""
    ndim, (tok,) = _prep(c, tokens_per_sequence)
    cap = _col(c.kv_capacity_tokens, ndim)
    return np.floor(cap / np.maximum(tok, 1.0)).astype(np.int64)


def tpot_bound_ms(c: Configs) -> np.ndarray:
    """Pure bandwidth bound on time per token at batch 1 (ms), no efficiency factor.

    = weight bytes each GPU reads per token / its peak bandwidth, summed over the pp stages
    a token passes in series: pp · (W/(t·pp)) / bw = W/(t·bw); MoE: W counts the dense part
    and the k experts one token touches. 70e9 params · 2 B / 2.0 TB/s = 70 ms.
    """
    w = _weight_bytes_read(c, np.ones(len(c)), 1)
    return c.pp * (w / c.gpus) / c.memory_bandwidth_bytes_s * 1e3


def compute_bound_tokens_s(c: Configs) -> np.ndarray:
    """Decode throughput roof (tokens/s) when compute-bound: eff·peak·t·p / (2·active)."""
    return c.peak_flops * c.compute_efficiency * c.gpus / (2.0 * c.model.active_params_b * 1e9)


# ---------------------------------------------------------------------------------------
# Offline max-throughput (all requests at once), as trtllm-bench / vLLM throughput measure


def offline_batch(c: Configs, input_tokens, output_tokens) -> np.ndarray:
    """Running sequences in an offline run: min(scheduler cap, sequences whose KV fits).

    A sequence reserves KV for input + f·output tokens (f = ``kv_reserved_output_fraction``).
    """
    ndim, (inp, out) = _prep(c, input_tokens, output_tokens)
    cap = _col(c.kv_capacity_tokens, ndim)
    fit = np.floor(cap / np.maximum(inp + c.kv_reserved_output_fraction * out, 1.0))
    return np.minimum(fit, float(c.max_batch_sequences))


def offline_throughput_tokens_s(c: Configs, input_tokens, output_tokens) -> tuple[np.ndarray, np.ndarray]:
    """(batch, output tokens/s of the replica) when all requests arrive at once.

    Steady state of continuous batching with fixed lengths: ``batch`` sequences decode
    (mean context input + output/2) and each step also prefills input·batch/output prompt
    tokens (every sequence's prompt amortised over its output tokens; attention span
    input/2). Throughput = batch / step time. Zero where not even one sequence fits.
    """
    ndim, (inp, out) = _prep(c, input_tokens, output_tokens)
    b = offline_batch(c, inp, out)
    bb = np.maximum(b, 1.0)
    step = decode_step_s(c, bb, inp + out / 2.0, bb * inp / np.maximum(out, 1.0), inp / 2.0)
    tput = np.where(b >= 1, bb / step, 0.0)
    return b, tput


# ---------------------------------------------------------------------------------------
# One configuration as a plain dict (what `gpuplan estimate --json` prints)


def finite_round(x, digits: int = 4) -> float | None:
    """``x`` rounded for JSON output, or None when it is NaN or infinite (JSON has neither)."""
    x = float(x)
    return round(x, digits) if np.isfinite(x) else None
