"""Performance model of one replica (one model copy on tp·pp·ep devices), vectorised.

Pure: no I/O, no printing. ``build_configs`` turns (device, precision, tp, pp) combos (with
an engine and an expert-parallel degree each) into aligned numpy arrays (:class:`Configs`);
every other function evaluates all of them at once. Physics per ``DESIGN.md`` §1/§5
(t = tp, p = pp, e = ep, G = e·t·p GPUs; a replica with e > 1 runs attention data-parallel
over e ranks of t GPUs and splits the routed experts e ways, as TensorRT-LLM's "DEP" does):

- storage: the embedding and lm_head matrices (``Model.embedding_params``) are stored at the
  precision's ``embedding_bytes_per_param`` (BF16), every other weight at
  ``weight_bytes_per_param`` (NVFP4 4.5 bits); weights per GPU = dense/(t·p) + experts/(e·t·p).
- MoE: bytes read per step = dense body + lm_head + experts touched · bytes per expert,
  experts touched per layer E·(1 − (1 − k/E)^B) for B tokens in the step (split e ways).
- KV bytes per token = 2 · layers · kv_heads · head_dim · kv dtype bytes (MLA: latent); with
  TP the KV heads are split over min(t, kv_heads) GPUs (an MLA latent is replicated), with
  PP each stage holds layers/p, with EP each attention rank holds its own sequences.
- memory fit: weights/GPU + workspace + KV ≤ usable fraction · memory (GiB).
- a decode step is a **sum of per-operator rooflines**, each a smooth max
  ``smax(a, b) = (a^n + b^n)^(1/n)`` of its memory and compute times (``smooth_max_exponent``):
  for one pipeline stage and a micro-batch of b/p sequences and n/p prefill tokens (T tokens),
  ``t_gemm = smax(dense bytes/GPU / (bw·e_bw), 2·dense active·T/G / (peak[gemm]·e_c)) +
  smax(touched expert bytes/GPU / (bw·e_bw), 2·k·expert·T/G / (peak[gemm]·e_c·e_moe)) +
  2·vocab·hidden·b/(p·e·t) / (peak[16 bit]·e_c)`` (dense GEMMs, MoE grouped GEMMs, lm_head),
  ``t_attn = smax(b·c·kv/(kv_shards·p·e) / (bw·e_bw), 4·L·H·d·b·c/G / (peak[attn]·e_attn))``,
  ``t_prefill_attn = 4·L·H·d·n·span/G / (peak[attn]·e_attn)``,
  ``t_comm = L/p · 2 · (2·(t−1)/t · T/e·hidden·act / link + latency)`` (tensor parallel)
  ``+ moe_layers/p · 2 · (2·(e−1)/e · T/e·k·hidden·act / link + latency)`` (all-to-all),
  ``t_hop = T·hidden·act/link + hop latency`` (p > 1 only);
  the step (every sequence advances one token) = ``p·(t_gemm + t_attn + t_prefill_attn +
  t_comm + t_hop) + t_host`` with ``t_host = step_overhead + (b/e)·sequence_overhead +
  [p > 1]·p·microbatch_overhead``. Efficiencies come from ``CalibrationParams.factors_for``
  (device class, engine, GEMM dtype).
- link = interconnect_gb_s/2 per direction when the group fits in interconnect_domain_gpus,
  else the host link pcie_gb_s/2, times ``link_efficiency``.

Units: bytes, seconds, FLOPs in arrays; ``_ms`` / ``_gb`` only where the name says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cached_property

import numpy as np

from catalog.errors import ModelError
from catalog.schema import Device, Model, Precision
from optimizer.models.params import CalibrationParams, check_engine, default_engine
from optimizer.models.speculative import SpeculativeCost

GIB_BYTES = 2.0**30
ATTENTION_FLOPS_PER_QK_ELEMENT = 4.0  # QK^T and A·V: 2 matmuls x 2 FLOPs per multiply-add
HARD_MAX_EXPONENT = 64.0  # smooth_max_exponent at or above which smax is np.maximum


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


def smooth_max(a, b, n: float):
    """``(a^n + b^n)^(1/n)`` for a, b >= 0 (= max(a, b) when n >= 64): the roofline of one
    operator whose memory and compute phases overlap imperfectly near the ridge."""
    if n >= HARD_MAX_EXPONENT:
        return np.maximum(a, b)
    hi = np.maximum(a, b)
    lo = np.minimum(a, b)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.where(hi > 0, lo / hi, 0.0)
        k = int(round(np.log2(n)))
        if 2.0**k == n:  # a power of two: k squarings and k square roots, much cheaper than pow
            x = r
            for _ in range(k):
                x = x * x
            y = 1.0 + x
            for _ in range(k):
                y = np.sqrt(y)
            return hi * y
        return hi * (1.0 + r**n) ** (1.0 / n)


def _per_combo(value, n: int, what: str) -> list:
    """``value`` (a scalar, None or a sequence of length n) as a list of n entries."""
    if value is None or isinstance(value, str | int | float | np.integer):
        return [value] * n
    out = list(value)
    if len(out) != n:
        raise ModelError(f"{what}: got {len(out)} values for {n} configurations")
    return out


@dataclass(frozen=True)
class Configs:
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
    peak_flops: np.ndarray  # dense peak of the GEMM compute dtype, FLOP/s (NaN if unsupported)
    compute_efficiency: np.ndarray  # GEMMs, by device class, engine and GEMM dtype
    attention_peak_flops: np.ndarray  # dense peak of the attention dtype, FLOP/s
    attention_efficiency: np.ndarray
    moe_efficiency: np.ndarray  # share of compute_efficiency the routed-expert grouped GEMMs reach
    lm_head_peak_flops: np.ndarray  # 16-bit peak (the lm_head stays BF16)
    step_overhead_s: np.ndarray
    sequence_overhead_s: np.ndarray  # host time per running sequence per step (sampling, bookkeeping)
    batch_cap: np.ndarray  # scheduler cap on running sequences of each configuration (engine default or --max-batch)
    link_bytes_s: np.ndarray  # achieved per-direction all-reduce link bandwidth
    allreduce_latency_s: np.ndarray
    activation_bytes: np.ndarray
    # model constants (bytes per parameter folded in)
    dense_weight_bytes: np.ndarray  # bytes read every step whatever the routing (body + lm_head)
    expert_weight_bytes: np.ndarray  # bytes of one routed expert over all MoE layers
    smooth_max_exponent: float
    moe_tile_tokens: float
    alltoall_latency_s: float
    pp_hop_latency_s: float
    pp_microbatch_overhead_s: float
    request_overhead_s: float  # front-end time per request, added once to TTFT and E2E (not a step)
    max_batch_sequences: int  # the default scheduler cap (serving's scalar view of batch_cap)
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
    engines: str | Sequence[str | None] | None = None,
    ep: int | Sequence[int] | None = None,
    max_batch: int | Sequence[int | None] | None = None,
) -> Configs:
    """Arrays for every (device, precision, tp, pp) combo; unrunnable ones keep a reason.

    ``engines``: serving engine per combo (None = ``default_engine`` of the device);
    ``ep``: expert-parallel degree per combo (attention data-parallel over ep ranks of tp GPUs;
    > 1 only for MoE models); ``max_batch``: scheduler cap on running sequences per combo
    (None = the engine's ``max_batch_sequences``).
    """
    n = len(combos)
    devices = [d for d, _, _, _ in combos]
    precs = [q for _, q, _, _ in combos]
    tp = np.array([t for _, _, t, _ in combos], dtype=np.int64).reshape(n)
    pp = np.array([p for _, _, _, p in combos], dtype=np.int64).reshape(n)
    default_of = {d.key: default_engine(d) for d in {d.key: d for d in devices}.values()}
    if engines is None:
        eng = [default_of[d.key] for d in devices]
    else:
        eng = [check_engine(e) if e is not None else default_of[d.key]
               for e, d in zip(_per_combo(engines, n, "engines"), devices, strict=True)]
    epa = (np.ones(n, dtype=np.int64) if ep is None else
           np.array([1 if e is None else int(e) for e in _per_combo(ep, n, "ep")], dtype=np.int64).reshape(n))
    caps = None if max_batch is None else _per_combo(max_batch, n, "max_batch")
    if n and (tp.min() < 1 or pp.min() < 1 or epa.min() < 1):
        raise ModelError(f"tp, pp and ep must be >= 1 (got tp {tp.min()}, pp {pp.min()}, ep {epa.min()})")
    if n and epa.max() > 1 and not model.is_moe:
        raise ModelError(f"ep {epa.max()}: {model.key} is a dense model; expert parallelism needs an MoE model "
                         "(use --tp for a dense model)")
    gpus = tp * pp * epa

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

    pair: dict[tuple[str, str], tuple[float, float, str | None]] = {}
    for d in dev_by_key.values():
        for q in prec_by_key.values():
            peak = q.compute_peak_tflops(d)
            attn = q.attention_peak_tflops(d)
            pair[(d.key, q.key)] = (np.nan if peak is None else peak * 1e12, attn * 1e12 if attn else np.nan,
                                    q.unsupported_reason(d))
    peak_flops = np.array([pair[(d.key, q.key)][0] for d, q in zip(devices, precs, strict=True)], dtype=float)
    attn_peak = np.array([pair[(d.key, q.key)][1] for d, q in zip(devices, precs, strict=True)], dtype=float)
    supported = ~np.isnan(peak_flops)

    # factors per distinct (device, engine, GEMM dtype), gathered by index
    fac_index: dict[tuple[str, str, str], int] = {}
    fac_list = []
    idx = np.empty(n, dtype=np.int64)
    for i, (d, q, e) in enumerate(zip(devices, precs, eng, strict=True)):
        k = (d.key, e, q.compute_dtype)
        j = fac_index.get(k)
        if j is None:
            j = fac_index[k] = len(fac_list)
            fac_list.append(params.factors_for(d, e, q.compute_dtype))
        idx[i] = j

    def per_fac(name: str) -> np.ndarray:
        return np.array([getattr(f, name) for f in fac_list], dtype=float)[idx] if n else np.zeros(0)

    eff_bw, eff_fl = per_fac("memory_bandwidth_efficiency"), per_fac("compute_efficiency")
    eff_at, eff_moe = per_fac("attention_efficiency"), per_fac("moe_efficiency")
    overhead_s = per_fac("step_overhead_ms") / 1e3
    seq_s = per_fac("sequence_overhead_us") / 1e6
    batch_cap = per_fac("max_batch_sequences")
    if caps is not None:
        batch_cap = np.array([b if c is None else float(c) for b, c in zip(batch_cap, caps, strict=True)], dtype=float)

    wbpp = per_prec(lambda q: q.weight_bytes_per_param)
    ebpp = per_prec(lambda q: q.embedding_bytes_per_param)
    emb = model.embedding_params
    routed = model.routed_expert_params
    # non-expert, non-embedding parameters read every step; for an MoE model from the shapes
    # (Model.dense_params: a published total is rounded, "1T", and may undercount the experts)
    vision = model.vision_params_b * 1e9
    body_dense = (model.dense_params if model.is_moe else model.total_params_b * 1e9 - vision) - emb
    dense_store = (body_dense + vision) * wbpp + emb * ebpp
    expert_store = routed * wbpp
    weight_total = dense_store + expert_store
    weight_per_gpu = dense_store / (tp * pp) + expert_store / gpus
    kv_bpt = per_prec(lambda q: model.kv_bytes_per_token(q.kv_bytes_per_element))
    kv_shards = np.ones(n) if model.is_mla else np.minimum(tp, model.num_kv_heads).astype(float)
    kv_per_token_per_gpu = kv_bpt / (kv_shards * pp)

    usable = per_dev(lambda d: d.memory_gb) * GIB_BYTES * params.memory_usable_fraction
    free = usable - weight_per_gpu - params.workspace_gb_per_gpu * GIB_BYTES
    kv_capacity = epa * free / kv_per_token_per_gpu
    fits = kv_capacity >= 1.0

    in_domain = gpus / pp <= per_dev(lambda d: d.interconnect_domain_gpus)
    link = np.where(in_domain, per_dev(lambda d: d.interconnect_gb_s), per_dev(lambda d: d.pcie_gb_s))
    link_bytes_s = link / 2 * 1e9 * params.link_efficiency
    latency_s = np.where(in_domain, params.allreduce_latency_us, params.pcie_allreduce_latency_us) / 1e6

    reason: list[str | None] = []
    for i, (d, q) in enumerate(zip(devices, precs, strict=True)):
        why = pair[(d.key, q.key)][2]
        if why is None and not fits[i]:
            ws = params.workspace_gb_per_gpu * GIB_BYTES
            par = f"tp{tp[i]}·pp{pp[i]}" + (f"·ep{epa[i]}" if epa[i] > 1 else "")
            why = (f"{model.key} in {q.key} needs {weight_per_gpu[i] / 1e9:.1f} GB of weights per GPU "
                   f"+ {ws / 1e9:.1f} GB workspace at {par}; {d.key} has {usable[i] / 1e9:.1f} GB "
                   f"usable ({params.memory_usable_fraction:.0%} of {d.memory_gb:g} GiB); "
                   "raise tp/pp/ep or use a smaller precision")
        reason.append(why)

    ppe = model.params_per_expert if model.is_moe else 0.0
    lm_head = float(model.vocab_size) * model.hidden_size  # read every step (tied or not); the input embedding is a lookup
    body_read = body_dense  # the vision tower is held (dense_store), not read, when generating text
    return Configs(
        keys=_keys(combos, eng, epa, default_of),
        model=model, devices=devices, precisions=precs, engines=eng,
        tp=tp, pp=pp, ep=epa, gpus=gpus,
        supported=supported, fits=fits, runnable=supported & fits, reason=reason,
        weight_bytes_total=weight_total, weight_bytes_per_gpu=weight_per_gpu,
        kv_bytes_per_token=kv_bpt, kv_shards=kv_shards,
        usable_bytes_per_gpu=usable, kv_capacity_tokens=np.maximum(kv_capacity, 0.0),
        memory_bandwidth_bytes_s=per_dev(lambda d: d.memory_bandwidth_tb_s) * 1e12,
        memory_bandwidth_efficiency=eff_bw,
        peak_flops=peak_flops, compute_efficiency=eff_fl,
        attention_peak_flops=attn_peak, attention_efficiency=eff_at, moe_efficiency=eff_moe,
        lm_head_peak_flops=per_dev(lambda d: d.peak_16bit_tflops) * 1e12,
        step_overhead_s=overhead_s, sequence_overhead_s=seq_s, batch_cap=batch_cap,
        link_bytes_s=link_bytes_s, allreduce_latency_s=latency_s,
        activation_bytes=per_prec(lambda q: q.activation_bytes),
        dense_weight_bytes=body_read * wbpp + lm_head * ebpp, expert_weight_bytes=ppe * wbpp,
        smooth_max_exponent=float(params.smooth_max_exponent), moe_tile_tokens=float(params.moe_tile_tokens),
        alltoall_latency_s=params.alltoall_latency_us / 1e6,
        pp_hop_latency_s=params.pp_hop_latency_us / 1e6,
        pp_microbatch_overhead_s=params.pp_microbatch_overhead_us / 1e6,
        request_overhead_s=params.request_overhead_ms / 1e3,
        max_batch_sequences=params.max_batch_sequences,
        kv_reserved_output_fraction=params.kv_reserved_output_fraction,
    )


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


# ---------------------------------------------------------------------------------------
# Building blocks (all broadcast: config arrays are reshaped to (N, 1, ...) as needed)


def effective_context(model: Model, context_tokens):
    """Context tokens attended (and cached) per sequence, averaged over the layers: windowed
    layers see at most the window (``Model.effective_kv_tokens``: (full·c + windowed·min(c, W))/layers)."""
    return model.effective_kv_tokens(context_tokens)


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
    ep: np.ndarray  # e, as float (attention data-parallel ranks)
    gpus: np.ndarray  # e·t·p, as float
    tp_pp: np.ndarray  # t·p: GPUs one attention rank's weights are spread over
    weight_bytes_per_gpu: np.ndarray  # stored
    dense_read_per_gpu: np.ndarray  # dense body + lm_head bytes read per step per GPU
    expert_read_per_gpu: np.ndarray  # bytes of one routed expert per GPU that holds it: expert/(t·p)
    kv_read_per_ctx_token: np.ndarray  # KV bytes per GPU per (sequence × context token) of its rank
    memory_bytes_s: np.ndarray  # achieved memory bandwidth per GPU, bw·eff_bw
    gemm_flops_s: np.ndarray  # achieved GEMM compute per GPU, peak·eff_flops (NaN if unsupported)
    moe_flops_s: np.ndarray  # achieved grouped-GEMM compute per GPU, peak·eff_flops·eff_moe
    gemm_flops_per_token: np.ndarray  # 2·active dense body params / G (attention, shared experts, dense FFNs)
    expert_flops_per_token: np.ndarray  # 2·k·params per expert / G (routed experts)
    lm_head_s_per_sequence: np.ndarray  # 2·vocab·hidden/(e·t) / (16-bit peak·eff_flops)
    attn_s_per_ctx_token: np.ndarray  # 4·L·H·d / G / (attention peak·e_attn)
    allreduces: np.ndarray  # all-reduces per stage pass, layers/p · 2 (0 at t = 1)
    ring_factor: np.ndarray  # 2·(t−1)/t: share of the bytes each GPU sends in a ring all-reduce
    alltoalls: np.ndarray  # all-to-alls per stage pass, moe_layers/p · 2 (0 at e = 1)
    a2a_factor: np.ndarray  # (e−1)/e · k: share of a rank's routed token copies that leave it
    activation_bytes: np.ndarray
    link_bytes_s: np.ndarray
    allreduce_latency_s: np.ndarray
    hop_s_fixed: np.ndarray  # pipeline hop latency (0 at p = 1)
    hop_on: np.ndarray  # p > 1
    step_overhead_s: np.ndarray  # fixed host time per step incl. p·microbatch overhead when p > 1
    sequence_overhead_s: np.ndarray  # host time per running sequence per step, / e ranks
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
        gemm_flops_s=c.peak_flops * c.compute_efficiency,
        moe_flops_s=c.peak_flops * c.compute_efficiency * c.moe_efficiency,
        gemm_flops_per_token=2.0 * body_active / gpus, expert_flops_per_token=2.0 * routed_active / gpus,
        lm_head_s_per_sequence=2.0 * lm_head / (t * e * p) / (c.lm_head_peak_flops * c.compute_efficiency),
        attn_s_per_ctx_token=attention_flops_per_context_token(m) / gpus
        / (c.attention_peak_flops * c.attention_efficiency),
        allreduces=np.where(t > 1, m.num_layers / p * 2.0, 0.0), ring_factor=2.0 * (t - 1.0) / t * hidden_act / e,
        alltoalls=np.where(e > 1, m.moe_layers / p * 2.0, 0.0),
        a2a_factor=(e - 1.0) / e * max(m.experts_per_token, 1) * hidden_act / e,
        activation_bytes=c.activation_bytes, link_bytes_s=c.link_bytes_s, allreduce_latency_s=c.allreduce_latency_s,
        hop_s_fixed=np.where(p > 1, c.pp_hop_latency_s, 0.0), hop_on=(p > 1).astype(float) * hidden_act,
        step_overhead_s=c.step_overhead_s + np.where(p > 1, p * c.pp_microbatch_overhead_s, 0.0),
        sequence_overhead_s=c.sequence_overhead_s / e,
    )


def _expert_bytes_read_per_gpu(c: Configs, tokens: np.ndarray, ndim: int):
    """Routed-expert bytes one GPU reads for one pass of ``tokens`` tokens of its stage (all
    ranks): E·(1 − (1 − k/E)^T)/e · expert/(t·p); 0 for a dense model."""
    m = c.model
    if not m.is_moe:
        return 0.0
    k = c.stage.shaped(ndim)
    touched = experts_touched(m.num_experts, m.experts_per_token, np.maximum(tokens, 1.0))
    return touched / k.ep * k.expert_read_per_gpu


def _weight_bytes_read_per_gpu(c: Configs, tokens: np.ndarray, ndim: int) -> np.ndarray:
    """Weight bytes one GPU reads for one pass of ``tokens`` tokens: dense/(t·p) + routed experts
    touched (``_expert_bytes_read_per_gpu``); for a dense model the (N, 1, ...) column."""
    return c.stage.shaped(ndim).dense_read_per_gpu + _expert_bytes_read_per_gpu(c, tokens, ndim)


def _gemm_s(c: Configs, tokens: np.ndarray, ndim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, memory side, compute side) of the GEMMs of one stage pass of ``tokens`` tokens: one
    roofline for the dense GEMMs (dense bytes vs 2·dense active·T FLOPs) plus one for the routed
    experts' grouped GEMMs (touched expert bytes vs 2·expert·max(k·T, touched·tile) FLOPs: each
    touched expert computes at least one M tile of ``moe_tile_tokens`` rows), each a smooth max."""
    k = c.stage.shaped(ndim)
    n = c.smooth_max_exponent
    dense_mem = k.dense_read_per_gpu / k.memory_bytes_s
    dense_comp = tokens * k.gemm_flops_per_token / k.gemm_flops_s
    time = smooth_max(dense_mem, dense_comp, n)
    if not c.model.is_moe:
        return time, dense_mem + 0.0 * tokens, dense_comp
    m = c.model
    touched = experts_touched(m.num_experts, m.experts_per_token, np.maximum(tokens, 1.0))
    exp_mem = touched / k.ep * k.expert_read_per_gpu / k.memory_bytes_s
    padded = np.maximum(tokens, touched * c.moe_tile_tokens / m.experts_per_token)  # rows padded to tiles
    exp_comp = padded * k.expert_flops_per_token / k.moe_flops_s
    return time + smooth_max(exp_mem, exp_comp, n), dense_mem + exp_mem, dense_comp + exp_comp


def attention_flops_per_context_token(model: Model) -> float:
    """FLOPs of attention for one query token per token of context, all layers: 4·layers·heads·head_dim."""
    return ATTENTION_FLOPS_PER_QK_ELEMENT * model.num_layers * model.num_attention_heads * model.head_dim


def _comm_s(c: Configs, tokens: np.ndarray, ndim: int) -> np.ndarray:
    """Communication of one stage pass of ``tokens`` tokens (all ranks): tensor-parallel ring
    all-reduces (2·(t−1)/t · T/e·hidden·act / link + latency each), expert-parallel all-to-alls
    ((e−1)/e · k·T/e·hidden·act / link + latency each) and the pipeline hop to the next stage."""
    k = c.stage.shaped(ndim)
    ar = k.allreduces * (k.ring_factor * tokens / k.link_bytes_s + k.allreduce_latency_s)
    a2a = k.alltoalls * (k.a2a_factor * tokens / k.link_bytes_s + c.alltoall_latency_s)
    hop = k.hop_on * tokens / k.link_bytes_s + k.hop_s_fixed
    return ar + a2a + hop


@dataclass(frozen=True)
class StepParts:
    """Components of one decode step (seconds): per pipeline stage the per-operator times
    (``gemm_s``, ``attn_s`` decode attention, ``prefill_attn_s``, ``comm_s`` incl. the hop),
    the host time of the step, and the full step time; ``mem_s``/``compute_s`` are the memory
    and compute sides of the stage summed over the operators (for the roofline view)."""

    gemm_s: np.ndarray
    attn_s: np.ndarray
    prefill_attn_s: np.ndarray
    comm_s: np.ndarray
    host_s: np.ndarray
    step_s: np.ndarray
    mem_s: np.ndarray
    compute_s: np.ndarray


def _decode_step(c: Configs, batch, context_tokens, prefill_tokens, prefill_context_tokens) -> StepParts:
    """``decode_parts``, each part at its own broadcast shape: terms that do not depend on the
    prefill tokens stay as small as the batch (N, 1, ...), so (N, K, ...) prefill grids cost less."""
    ndim, (b, ctx, npre, pctx) = _prep(c, batch, context_tokens, prefill_tokens, prefill_context_tokens)
    k = c.stage.shaped(ndim)
    n = c.smooth_max_exponent
    micro_b = b / k.pp
    micro_n = npre / k.pp
    tokens = micro_b + micro_n
    spec = c.speculative
    verify = micro_b * spec.draft_tokens if spec is not None else 0.0  # draft tokens checked in the same pass
    tokens = tokens + verify
    gemm, weights_mem, gemm_comp = _gemm_s(c, tokens, ndim)
    lm_head = (micro_b + verify) * k.lm_head_s_per_sequence
    gemm_s = gemm + lm_head
    seq_ctx = effective_context(c.model, ctx)
    decode_ctx = micro_b * seq_ctx  # context tokens the decoding micro-batch attends to
    kv_mem = decode_ctx * k.kv_read_per_ctx_token / k.memory_bytes_s  # verify tokens reuse the same KV reads
    attn_comp = (decode_ctx + verify * seq_ctx) * k.attn_s_per_ctx_token
    attn_s = smooth_max(kv_mem, attn_comp, n)
    prefill_attn_s = micro_n * effective_context(c.model, pctx) * k.attn_s_per_ctx_token
    comm_s = _comm_s(c, tokens, ndim)
    host_s = k.step_overhead_s + b * k.sequence_overhead_s
    step_s = k.pp * (gemm_s + attn_s + prefill_attn_s + comm_s) + host_s
    if spec is not None:
        step_s = step_s + draft_s(c, b, ctx, ndim)
    return StepParts(gemm_s, attn_s, prefill_attn_s, comm_s, host_s, step_s,
                     weights_mem + kv_mem, gemm_comp + lm_head + attn_comp + prefill_attn_s)


def draft_s(c: Configs, batch, context_tokens, ndim: int = 1) -> np.ndarray:
    """Time (s) of the k draft passes of a speculative step (0 without ``c.speculative``).

    One pass = the per-operator rooflines of the step for the whole batch b (one token per
    sequence), scaled to the share of the target the draft reads: ``f·(t_gemm(b) + t_attn(b, c)·(1 + r_x/f))``
    plus the extra draft weights ``max(P_x·β/(t·p)/bw, 2·P_a·b/(t·p)/flops)``, with f the layer
    fraction, r_x the draft's KV ratio, β the stored bytes per parameter and P_x, P_a the extra
    (LM head or draft-model) parameters read and computed (``optimizer.models.speculative``).
    """
    spec = c.speculative
    if spec is None:
        return np.zeros(np.shape(batch))
    k = c.stage.shaped(ndim)
    n = c.smooth_max_exponent
    b = np.maximum(np.asarray(batch, dtype=float), 1.0)
    micro_b = b / k.pp
    gemm, _, _ = _gemm_s(c, micro_b, ndim)
    decode_ctx = micro_b * effective_context(c.model, context_tokens)
    kv_share = spec.layer_fraction + spec.extra_kv_ratio
    attn = smooth_max(decode_ctx * k.kv_read_per_ctx_token * kv_share / k.memory_bytes_s,
                      decode_ctx * k.attn_s_per_ctx_token * kv_share, n)
    bytes_per_param = k.weight_bytes_per_gpu * k.tp_pp / (c.model.total_params_b * 1e9)
    extra = smooth_max(spec.extra_weight_params * bytes_per_param / k.tp_pp / k.memory_bytes_s,
                       2.0 * spec.extra_active_params * micro_b / k.tp_pp / k.gemm_flops_s, n)
    return spec.draft_tokens * k.pp * (spec.layer_fraction * gemm + attn + extra)


def decode_parts(c: Configs, batch, context_tokens, prefill_tokens=0.0,
                 prefill_context_tokens=0.0) -> StepParts:
    """Per-operator stage times and step time of a decode step (see module docstring for the
    formulas), all of the same (broadcast) shape.

    ``prefill_context_tokens`` is the mean context (attention span) of the prefill tokens;
    a prompt of length L processed whole has mean span L/2.
    """
    parts = _decode_step(c, batch, context_tokens, prefill_tokens, prefill_context_tokens)
    shape = parts.step_s.shape
    return StepParts(*(np.broadcast_to(getattr(parts, f.name), shape) for f in fields(parts)))


def decode_step_s(c: Configs, batch, context_tokens, prefill_tokens=0.0,
                  prefill_context_tokens=0.0) -> np.ndarray:
    """Wall time (s) of one scheduler step in which each of ``batch`` running sequences
    (mean context ``context_tokens``) advances one token and ``prefill_tokens`` prompt
    tokens are processed (chunked prefill).

    ``= pp · (t_gemm + t_attn + t_prefill_attn + t_comm) + t_host`` with per-stage
    micro-batches of batch/pp (see module docstring). Broadcasts against (N,) or (N, K)
    inputs; NaN where the device cannot compute in the precision.
    """
    return _decode_step(c, batch, context_tokens, prefill_tokens, prefill_context_tokens).step_s


def tpot_s(c: Configs, batch, context_tokens) -> np.ndarray:
    """Time per output token (s) of every sequence at ``batch`` = one decode step."""
    return decode_step_s(c, batch, context_tokens)


def bound_kind(c: Configs, batch, context_tokens) -> np.ndarray:
    """'memory', 'compute' or 'communication': the largest side of a decode stage."""
    parts = decode_parts(c, batch, context_tokens)
    mem, comp, comm = np.broadcast_arrays(parts.mem_s, parts.compute_s, parts.comm_s)
    out = np.where(comp > mem, "compute", "memory").astype(object)
    out = np.where(comm > np.maximum(mem, comp), "communication", out)
    return out.astype(str)


def prefill_s(c: Configs, prompt_tokens, batch_prompts=1) -> np.ndarray:
    """Time (s) to prefill ``batch_prompts`` prompts of ``prompt_tokens`` tokens each, in one pass.

    The GEMMs (smooth max of weight reads and 2·active·L·n FLOPs) plus causal attention
    (span L/2 per token, 4·layers·heads·head_dim FLOPs per element) plus communication, through
    the pp stages in series, plus the fixed step overhead; the prompts of one pass run on one
    attention rank (ep ranks do not split one prompt).
    """
    ndim, (L, nb) = _prep(c, prompt_tokens, batch_prompts)
    k = c.stage.shaped(ndim)
    tokens = L * nb
    # the prompt occupies one attention rank: its per-GPU work is that of e·T tokens spread over the group
    rank_tokens = tokens * k.ep
    gemm = _gemm_s(c, rank_tokens, ndim)[0]  # the lm_head of the last token is neglected, as in a step
    attn_s = rank_tokens * effective_context(c.model, L / 2.0) * k.attn_s_per_ctx_token
    return k.pp * (gemm + attn_s + _comm_s(c, tokens, ndim)) + k.step_overhead_s


def max_sequences(c: Configs, tokens_per_sequence) -> np.ndarray:
    """Sequences of ``tokens_per_sequence`` tokens whose KV fits in the replica (floor, >= 0)."""
    ndim, (tok,) = _prep(c, tokens_per_sequence)
    cap = _col(c.kv_capacity_tokens, ndim)
    return np.floor(cap / np.maximum(effective_context(c.model, tok), 1.0)).astype(np.int64)


def tpot_bound_ms(c: Configs) -> np.ndarray:
    """Pure bandwidth bound on time per token at batch 1 (ms), no efficiency factor.

    = weight bytes each GPU reads per token / its peak bandwidth, summed over the pp stages
    a token passes in series: pp · (W/(t·pp)) / bw = W/(t·bw); W counts the body and the lm_head
    (embedding bytes), MoE the dense part and the k experts one token touches.
    70e9 params · 2 B / 2.0 TB/s = 70 ms.
    """
    w = _weight_bytes_read_per_gpu(c, np.ones(len(c)), 1)
    return c.pp * w / c.memory_bandwidth_bytes_s * 1e3


def compute_bound_tokens_s(c: Configs) -> np.ndarray:
    """Decode throughput roof (tokens/s) when compute-bound: eff·peak·G / (2·active)."""
    return c.peak_flops * c.compute_efficiency * c.gpus / (2.0 * c.model.active_params_b * 1e9)


# ---------------------------------------------------------------------------------------
# Offline max-throughput (all requests at once), as trtllm-bench / vLLM throughput measure


def offline_batch(c: Configs, input_tokens, output_tokens) -> np.ndarray:
    """Running sequences in an offline run: min(scheduler cap ``batch_cap``, sequences whose KV fits).

    A sequence reserves KV for input + f·output tokens (f = ``kv_reserved_output_fraction``),
    windowed layers for at most their window (``effective_context``).
    """
    ndim, (inp, out) = _prep(c, input_tokens, output_tokens)
    cap = _col(c.kv_capacity_tokens, ndim)
    fit = np.floor(cap / np.maximum(effective_context(c.model, inp + c.kv_reserved_output_fraction * out), 1.0))
    return np.minimum(fit, _col(c.batch_cap, ndim))


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
