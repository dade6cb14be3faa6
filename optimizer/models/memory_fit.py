"""What one replica stores per GPU and how many KV tokens fit beside it (the memory fit).

Pure: no I/O. Physics per ``DESIGN.md`` §1 (t = tp, p = pp, e = ep):

- storage: the embedding and lm_head matrices (``Model.embedding_params``) are stored at the
  precision's ``embedding_bytes_per_param`` (BF16), every other weight at
  ``weight_bytes_per_param`` (NVFP4 4.5 bits); weights per GPU = dense/(t·p) + experts/(e·t·p), whole experts per GPU.
  A checkpoint that quantizes only its routed experts (``Model.unquantized_dense``: gpt-oss) keeps
  the non-expert body at 16 bit too.
- KV bytes per token = 2 · layers · kv_heads · head_dim · kv dtype bytes (MLA: latent); with
  TP the KV heads are split over min(t, kv_heads) GPUs (an MLA latent is replicated), with
  PP each stage holds layers/p, with EP each attention rank holds its own sequences.
- memory fit: weights/GPU + workspace + KV ≤ usable fraction · memory (GiB).

Units: bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from catalog.schema import Device, Model, Precision
from optimizer.models.params import CalibrationParams

GIB_BYTES = 2.0**30


@dataclass(frozen=True)
class ReplicaMemory:
    """What one replica stores and how many KV tokens fit (arrays (N,); bytes)."""

    wbpp: np.ndarray  # stored bytes per (non-embedding) parameter
    dbpp: np.ndarray  # stored bytes per non-expert body parameter (wbpp, or 16 bit: Model.unquantized_dense)
    body_dense: float  # non-expert, non-embedding, non-vision parameters
    weight_total: np.ndarray
    weight_per_gpu: np.ndarray
    kv_bpt: np.ndarray
    kv_shards: np.ndarray
    usable: np.ndarray
    kv_capacity: np.ndarray
    fits: np.ndarray


def expert_share(model: Model, epa) -> np.ndarray:
    """Share of the routed experts on the fullest of e expert-parallel GPUs: ceil(E/e)/E (whole experts per
    GPU: ep 3 on Mixtral's 8 puts 3 on the fullest, 3/8 not 8/3/8); where e divides E it is the same
    double as 1/e (both the correctly rounded 1/e; checked for E, e <= 1024)."""
    e = np.asarray(epa, dtype=float)
    n = model.num_experts
    if not n:
        return 1.0 / e
    return np.ceil(n / e) / n


def replica_memory(model: Model, params: CalibrationParams, tp, pp, epa, per_dev, per_prec) -> ReplicaMemory:
    """Weights per GPU = dense/(t·p) + experts·ceil(E/e)/(E·t·p) (``expert_share``; embedding and lm_head
    at the embedding bytes); KV tokens that fit = e · (usable − weights − workspace) / (KV bytes per token per GPU)."""
    wbpp = per_prec(lambda q: q.weight_bytes_per_param)
    ebpp = per_prec(lambda q: q.embedding_bytes_per_param)
    dbpp = ebpp if model.unquantized_dense else wbpp  # the non-expert body: 16 bit in an experts-only checkpoint
    emb = model.embedding_params
    # non-expert, non-embedding parameters read every step; for an MoE model from the shapes
    # (Model.dense_params: a published total is rounded, "1T", and may undercount the experts)
    vision = model.vision_params_b * 1e9
    body_dense = (model.dense_params if model.is_moe else model.total_params_b * 1e9 - vision) - emb
    dense_store = (body_dense + vision) * dbpp + emb * ebpp
    expert_store = model.routed_expert_params * wbpp
    weight_per_gpu = dense_store / (tp * pp) + expert_share(model, epa) * expert_store / (tp * pp)
    kv_bpt = per_prec(lambda q: model.kv_bytes_per_token(q.kv_bytes_per_element))
    kv_shards = np.ones(len(tp)) if model.is_mla else np.minimum(tp, model.num_kv_heads).astype(float)
    usable = per_dev(lambda d: d.memory_gb) * GIB_BYTES * params.memory_usable_fraction
    free = usable - weight_per_gpu - params.workspace_gb_per_gpu * GIB_BYTES
    kv_capacity = epa * free / (kv_bpt / (kv_shards * pp))
    return ReplicaMemory(wbpp, dbpp, body_dense, dense_store + expert_store, weight_per_gpu, kv_bpt, kv_shards, usable,
                         kv_capacity, kv_capacity >= 1.0)


def no_fit_reason(model: Model, params: CalibrationParams, d: Device, q: Precision, tp: int, pp: int, ep: int,
                  weight_per_gpu: float, usable: float) -> str:
    """The one-line reason a supported combo does not fit (weights, workspace, usable memory, the fix)."""
    ws = params.workspace_gb_per_gpu * GIB_BYTES
    par = f"tp{tp}·pp{pp}" + (f"·ep{ep}" if ep > 1 else "")
    return (f"{model.key} in {q.key} needs {weight_per_gpu / 1e9:.1f} GB of weights per GPU "
            f"+ {ws / 1e9:.1f} GB workspace at {par}; {d.key} has {usable / 1e9:.1f} GB "
            f"usable ({params.memory_usable_fraction:.0%} of {d.memory_gb:g} GiB); "
            "raise tp/pp/ep or use a smaller precision")
